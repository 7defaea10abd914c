// One LaCT-BiMamba block (SPEC.md section 4) on the GPU over this rank's
// contiguous shard, the CUDA counterpart of cpu_block.h. Internal to
// CudaRunner.
//
// Three [L, D] activations (x, h = rmsnorm(x), acc) live on the device for
// the whole shard; everything else is computed tile by tile in scratch of
// `tile` tokens, so device memory is about 3·L·D floats plus a few tiles.
//
// With a group of more than one rank (contexts only) the block exchanges, in
// the same order on every rank: the conv halos and scan summaries of both
// directions through `sync` (small, host-staged, composed on the host by
// shard_exchange.h), and one gradient all-reduce per LaCT chunk through
// `grads`. Chunk 0's all-reduce is started before the BiMamba kernels are
// queued and finished after them, so it overlaps them.
#ifndef LACT_WORKER_CUDA_BLOCK_H_
#define LACT_WORKER_CUDA_BLOCK_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan.h"
#include "worker/collective.h"
#include "worker/device_allreduce.h"

namespace lact {

// The model's tensors on the device, found by their host pointer.
class DeviceWeights {
 public:
  absl::Status Upload(const Model& model, cuda::CudaContext& ctx);
  const float* operator()(const float* host) const { return device_of_.at(host); }

 private:
  std::map<const float*, cuda::DeviceBuffer> buffers_;
  std::map<const float*, const float*> device_of_;
};

struct CudaShard {
  Collective* sync = nullptr;         // halos, summaries (host memory)
  DeviceAllReduce* grads = nullptr;   // LaCT gradients; null on a group of one
  int64_t begin = 0;                  // global index of the shard's first token
  int64_t total = 0;                  // tokens in the whole sequence
  std::function<bool()> cancelled;    // polled between tiles

  bool distributed() const { return sync->size() > 1; }
  bool Cancelled() const { return cancelled && cancelled(); }
};

class CudaBlock {
 public:
  // Allocates the activations for `tokens` rows and the tile scratch.
  static absl::StatusOr<std::unique_ptr<CudaBlock>> Create(const ModelConfig& c, cuda::CudaContext& ctx,
                                                           const DeviceWeights& weights, const CudaShard& shard,
                                                           int64_t tokens, int64_t tile);

  int64_t tokens() const { return L_; }
  int64_t tile() const { return tile_; }
  float* x() { return x_.get(); }  // [L, D], the residual stream
  float* h() { return h_.get(); }  // [L, D], scratch between blocks

  // x <- block(x). Context: `state` receives the layer's state (identical on
  // every rank). Query (group of one): `state` is the context's, read.
  absl::Status Run(const LayerWeights& w, bool is_context, LayerState* state);

 private:
  CudaBlock(const ModelConfig& c, cuda::CudaContext& ctx, const DeviceWeights& weights, const CudaShard& shard)
      : c_(c), ctx_(ctx), weights_(weights), shard_(shard) {}

  // BiMamba (cuda_bimamba.cc): acc = both directions' mixer outputs @ out_proj^T.
  absl::Status BiMamba(const LayerWeights& w, bool is_context, LayerState* state);
  absl::Status ExchangeHalo(Direction dir, const MambaDirWeights& m, MambaState* start, MambaState* final);
  // One direction over the shard's tiles in scan order from the device state
  // (ssm_, conv_); with `outputs`, acc += its output, else only the state
  // advances. log_decay (device, [H_s], may be null) accumulates sum dt A.
  absl::Status ScanTiles(const LayerWeights& w, Direction dir, bool outputs, float* log_decay);
  absl::Status UploadState(const MambaState& s);
  absl::Status DownloadState(MambaState* s);

  // LaCT (cuda_lact.cc).
  int64_t Chunks(bool is_context) const;
  std::pair<int64_t, int64_t> LocalRange(int64_t chunk, bool is_context) const;
  absl::Status LoadFastWeights(const LayerWeights& w, bool is_context, const LayerState& state);
  absl::Status LocalGrads(const LayerWeights& w, int64_t chunk);
  absl::Status UpdateFastWeights(const LayerWeights& w);
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t chunk, bool is_context);
  absl::Status DownloadFastWeights(LayerState* state);

  // x += acc; x += SwiGLU-MLP(rmsnorm(x, norm2)), tile by tile.
  absl::Status ResidualMlp(const LayerWeights& w);

  cudaStream_t stream() const { return ctx_.stream(); }
  absl::Status CheckCancelled() const;

  const ModelConfig& c_;
  cuda::CudaContext& ctx_;
  const DeviceWeights& weights_;
  const CudaShard& shard_;
  int64_t L_ = 0, tile_ = 0;
  cuda::DeviceBuffer x_, h_, acc_;                      // [L, D]
  cuda::DeviceBuffer rev_, proj_, xbc_, dt_, y_, a_;    // BiMamba tiles
  cuda::DeviceBuffer ssm_, conv_, conv_scratch_, log_decay_;
  cuda::SsdWorkspace ssd_;
  cuda::DeviceBuffer kv_, lr_, q_, o_, g_, u_, dh_;     // LaCT tiles; g, u, dh are [H_t, tile, d_h]
  cuda::DeviceBuffer fast_, grads_;                     // w0 | w1 | w2 and their gradients
  cuda::DeviceBuffer muon_;                             // Newton-Schulz scratch
  cuda::DeviceBuffer gate_, up_;                        // MLP tiles
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_BLOCK_H_
