// The BiMamba mixer part of the CPU ops (cpu_ops.h): a tile of the block's
// normed input h through one direction's Mamba-2 mixer (kernels/cpu
// mamba_mixer.h), its scan state carried between tiles, its outputs
// projected into acc. In float32 the output projection runs once, on the
// sum of both directions' outputs (docs/model.md section 5): the first
// direction's are held until the second's tile reaches them, in acc's
// memory and a [L, d_inner - D] buffer (L x D floats for preset:small).
// The bf16 mode projects each direction's rounded outputs, the float64
// reference's bf16_operands form; where activations are made as bf16 the
// mixer reads h16 and makes its outputs as bf16. The scan and its state
// stay float32. Scratch is allocated on first use and kept for the
// sequence.
#ifndef LACT_WORKER_CPU_CPU_MIXER_OPS_H_
#define LACT_WORKER_CPU_CPU_MIXER_OPS_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/mamba_mixer.h"
#include "worker/cpu/cpu_precision.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CpuMixerOps {
 public:
  // All outlive the ops.
  CpuMixerOps(const ModelConfig& c, const CpuPrecision& precision, CpuActivations& rows,
              int64_t tokens, int64_t tile);

  // A block starts: no direction's outputs are held.
  void BeginBlock() { held_dir_ = -1; }
  void LoadScanState(const MambaState& state);
  void StoreScanState(MambaState* state, float* log_decay) const;
  // BackendOps::MixerTile.
  void Tile(const LayerWeights& w, Direction dir, int64_t first, int64_t n, bool outputs,
            bool summarize);

 private:
  // The tile on its rows of h, `h` (float, or uint16_t bf16), its outputs
  // made as T.
  template <typename T>
  void TileOf(const T* h, const LayerWeights& w, Direction dir, int64_t first, int64_t n,
              bool outputs, bool summarize);
  // The scan-order rows of an n-row tile: `rows` itself (forward), or
  // reversed into `buffer` (backward).
  template <typename T>
  const T* ScanOrder(const T* rows, Direction dir, int64_t n, std::vector<T>* buffer);
  cpu::MixerStateView State();
  // The pre-pass: the state the tile leaves, and its decay if `summarize`.
  void Summarize(const MambaDirWeights& m, const float* rows, int64_t n, bool summarize);
  // The tile's outputs y (rounded), @ out_proj^T added to acc's rows (each
  // direction's product apart, as the float64 reference's bf16_operands
  // rounds them: the rounded sum is another rounding).
  template <typename T>
  void ProjectEach(const LayerWeights& w, T* y, Direction dir, int64_t first, int64_t n);
  // Float32: the tile's outputs plus the held ones, @ out_proj^T into
  // acc's rows.
  void ProjectSum(const LayerWeights& w, Direction dir, int64_t first, int64_t n);
  // Row j (in sequence order) of y_ for an n-row tile of `dir` (y_ is in
  // scan order).
  const float* OutputRow(Direction dir, int64_t n, int64_t j) const;
  // Holds the tile's outputs, rows [first, first + n) in sequence order, for
  // the other direction's tiles to add to and project: each row's first D
  // columns in acc's row (free until then), the rest in held_high_.
  void HoldOutputs(Direction dir, int64_t first, int64_t n);

  const ModelConfig& c_;
  const CpuPrecision& precision_;
  CpuActivations& rows_;
  const int64_t tokens_, tile_;
  MambaState scan_;
  std::vector<float> log_decay_;
  std::vector<float> reversed_, y_;         // a tile of h reversed (or widened), of y
  std::vector<uint16_t> reversed16_, y16_;  // the same as bf16
  // The block's first direction with outputs (-1: none yet), whose outputs
  // are held (float32); columns D and up of its rows ([L, d_inner - D]); a
  // tile of both directions' outputs summed (or, in the bf16 mode, of one
  // direction's projected).
  int held_dir_ = -1;
  std::vector<float> held_high_, summed_;
  cpu::MixerWorkspace mixer_ws_;
  NormedScratch normed_;  // the tile's rows of h
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_MIXER_OPS_H_
