// The BiMamba mixer part of the CUDA ops (cuda_ops.h): one direction's
// mixer over a tile of h (projection, dt, conv + SiLU, the SSD scan, gated
// norm, out_proj into acc), its scan state on the device between tiles,
// and the state's trips to and from the host. The backward direction runs
// by index: its rows are projected in sequence order, and the conv and the
// scan walk them from the last (negated row strides), writing their
// outputs back in sequence order, so no reversed copy is made and out_proj
// adds straight into acc. Its scratch holds tile() tokens. With
// In bf16 precision in_proj writes its rows (z, x|B|C, dt) as bf16. With
// SsdMath::kBf16 (bf16 precision only) the conv writes x, B and C as bf16,
// SsdScanBf16 writes y as bf16 and the gated norm rounds it in place for
// out_proj: no fp32 copy of either is made. In bf16 precision out_proj
// runs once per block on the sum of the two directions (NormAndProject).
#ifndef LACT_WORKER_CUDA_CUDA_MIXER_OPS_H_
#define LACT_WORKER_CUDA_CUDA_MIXER_OPS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan.h"
#include "worker/cuda/cuda_activations.h"
#include "worker/cuda/device_weights.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CudaMixerOps : private CudaPart {
 public:
  using CudaPart::CudaPart;

  // The state and scratch for tiles of up to `tile` tokens.
  absl::Status Allocate(int64_t tile, cuda::SsdMath scan_math);
  // A block starts: no direction's outputs are held.
  void BeginBlock() { holding_.reset(); }
  // BackendOps' LoadScanState, StoreScanState and MixerTile.
  absl::Status LoadScanState(const MambaState& state);
  absl::Status StoreScanState(MambaState* state, float* log_decay);
  absl::Status Tile(const LayerWeights& w, Direction dir, int64_t first, int64_t n, bool outputs,
                    bool summarize);

 private:
  // The conv, the scan (fp32, or with bf16_scan_ the bf16 one, reading
  // and writing bf16), the gated norm and out_proj of a tile whose
  // projections are in proj_ and dt_.
  absl::Status Scan(const LayerWeights& w, Direction dir, int64_t first, int64_t n, bool outputs,
                    bool summarize);
  // The gated norm of a tile's scan outputs y (di-wide rows in sequence
  // order), then out_proj into acc: each direction's added, or, where the
  // first direction's rows can be held (HoldsFirstDirection), the sum of
  // both projected once (BackendOps::MixerTile allows it).
  absl::Status NormAndProject(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                              cuda::Values y);
  // bf16 precision with d_inner <= 2 d_model: a row of the first
  // direction's bf16 outputs fits in acc's row until the second's.
  bool HoldsFirstDirection() const;

  bool bf16_scan_ = false;
  std::optional<Direction> holding_;  // the direction whose outputs acc holds
  TileValues proj_;                   // in_proj's rows: z | x, B, C | dt
  cuda::DeviceBuffer xbc_, dt_, y_;   // tiles (xbc_ and y_ fp32 scan only)
  cuda::DeviceBuffer xbc16_;          // the bf16 scan's x, B and C
  cuda::DeviceBuffer y16_;            // the gated norm's bf16 output (and the bf16 scan's y)
  cuda::DeviceBuffer ssm_, conv_, conv_scratch_, log_decay_;  // the scan state
  cuda::SsdWorkspace ssd_;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_MIXER_OPS_H_
