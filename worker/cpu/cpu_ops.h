// The CPU backend's BackendOps (backend_ops.h): float32 on oneDNN and
// OpenMP, the kernels of kernels/cpu. With cpu::Operands::kBf16 every GEMM
// operand is rounded to bf16 before its GEMM (the reference's
// bf16_operands; the bf16 matmul or float32 sgemm, bf16_matmul.h): the
// model's weights must come rounded (RoundGemmWeightsToBf16 in
// cpu_runner.h); each activation that only GEMMs read (h, the mixer's y,
// k|v, q, the hidden factors, o, the MLP's inputs) goes through
// cpu::RoundForBf16Gemm once as it is made (rounded in place for the
// emulation, rounded by the bf16 matmul as it packs it otherwise; ReadRows
// returns h rounded either way), and the ops keep a rounded copy of the
// fast weights beside their float32 masters. The linear layers run on the
// model's weights packed once for oneDNN's matmul kernels
// (cpu::PackedWeights), and the bf16 matmul reads a bf16 copy of the
// rounded fast weights (cpu::Bf16Copies) instead of packing them on each
// call: the model must not change while the ops live. On the bf16 matmul
// (cpu::Bf16MatmulOn()) the activations only GEMMs read are made as bf16
// once, where they are made: h (kept as bf16 only: half h's memory), the
// mixer's normed y, the MLP's normed input and hidden rows, LaCT's
// per-head k, v, q and hidden factors. In float32 the BiMamba output
// projection runs once, on the sum of both directions' outputs (docs/model.md
// section 5): the first direction's are held until the second's tile
// reaches them, in acc's memory and a [L, d_inner - D] buffer (L x D floats
// for preset:small). The bf16 mode projects each direction's rounded
// outputs, the float64 reference's bf16_operands form. The SSD scan, norms and states
// stay float32. The activations are host tensors; the
// tile scratch is allocated on first use and kept for the sequence. The
// LaCT update and apply and the MLP split a tile's rows into one slice per
// thread (cpu::ForRowSlices), each slice's GEMMs on its own core; the
// update's slices sum their gradients in slice order. The
// gradient all-reduce goes through `grads` (a Collective of the shard's
// group) on a thread of its own, so that it overlaps the compute thread.
#ifndef LACT_WORKER_CPU_CPU_OPS_H_
#define LACT_WORKER_CPU_CPU_OPS_H_

#include <cstdint>
#include <future>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/lact_ops.h"
#include "kernels/cpu/mamba_mixer.h"
#include "worker/collective/collective.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/shard.h"

namespace lact {

class CpuOps final : public BackendOps {
 public:
  // `grads` (may be null for a group of one), `stats` and `packed` outlive
  // the ops. `packed` holds the model's weights packed for the matmul (a
  // runner's, kept across its sequences); null: the ops pack their own.
  CpuOps(const Model& model, const ModelConfig& c, int64_t tokens, int64_t tile, Collective* grads,
         OverlapStats* stats, cpu::Operands operands = cpu::Operands::kFp32,
         cpu::PackedWeights* packed = nullptr);
  ~CpuOps() override;

  absl::Status LoadTokens(Tensor tokens) override;
  absl::Status OutputRows(int64_t first, int64_t n, float* out) override;
  absl::Status ReadRows(Activation a, int64_t first, int64_t n, float* out) override;
  absl::Status BeginBlock(const LayerWeights& w) override;

  absl::Status LoadScanState(const MambaState& state) override;
  absl::Status StoreScanState(MambaState* state, float* log_decay) override;
  absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) override;

  absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) override;
  absl::Status StoreFastWeights(LayerState* state) override;
  absl::Status ZeroGrads() override;
  absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) override;
  absl::Status StartGradAllReduce() override;
  absl::Status FinishGradAllReduce() override;
  absl::Status UpdateFastWeights(const LayerWeights& w) override;
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) override;

  absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) override;
  absl::Status Sync() override { return absl::OkStatus(); }

 private:
  // Each of w0, w1, w2 (and their gradients) has this many floats.
  int64_t FastSize() const;
  // The fast weights as the GEMMs take them (rounded in the bf16 mode).
  cpu::FastWeightsRef Fast() const;
  // After fast_ changed: its rounded copy, in the bf16 mode.
  void RoundFastWeights();
  // In the bf16 mode: rows [0, n) of a GEMM operand, made ready for its
  // GEMMs (cpu::RoundForBf16Gemm).
  void RoundOperand(float* x, int64_t ld, int64_t n, int64_t cols) const;
  cpu::FastGradsRef Grads();
  // Row j (in sequence order) of the mixer's output y_ for an n-row tile of
  // direction `dir` (y_ is in scan order).
  const float* OutputRow(Direction dir, int64_t n, int64_t j) const;
  // Holds the tile's outputs, rows [first, first + n) in sequence order, for
  // the other direction's tiles to add to and project: each row's first D
  // columns in acc_'s row (free until then), the rest in held_high_.
  void HoldOutputs(Direction dir, int64_t first, int64_t n);
  // The tile's outputs plus the held ones, @ out_proj^T into acc's rows.
  void ProjectSum(const LayerWeights& w, Direction dir, int64_t first, int64_t n);
  // The bf16 mode's: the tile's outputs, rounded, @ out_proj^T added to
  // acc's rows (each direction's product apart, as the float64 reference's
  // bf16_operands rounds them: the rounded sum is another rounding).
  void ProjectEach(const LayerWeights& w, Direction dir, int64_t first, int64_t n);
  // MixerTile where bits_: on h16_, the outputs made as bf16 into y16_.
  absl::Status MixerTileBits(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                             bool outputs, bool summarize);

  // One thread's scratch for its slice of a tile's rows.
  struct SliceScratch {
    std::vector<float> kv, lr, q, o;  // LaCT
    // dw0 | dw1 | dw2 of slices after the first, summed over the tiles
    // since ZeroGrads when grads_live (FoldSliceGrads adds them to grads_).
    std::vector<float> grads;
    bool grads_live = false;
    cpu::LactWorkspace lact;
    std::vector<float> normed, gate, up;  // MLP
    // The MLP's normed input and hidden rows as bf16 (the bf16 matmul).
    std::vector<uint16_t> normed16, hidden16;
  };
  // One scratch per thread, grown before a parallel region.
  void GrowSlices();
  // AccumulateGrads', ApplyFastWeights' and ResidualMlp's work on rows
  // [first, first + n).
  void AccumulateRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s,
                      cpu::FastGradsRef grads);
  void ApplyRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s);
  void MlpRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s);
  // grads_ += every live slice's partial gradients, which then are not live:
  // before anything reads grads_ (once per chunk, not once per tile).
  void FoldSliceGrads();

  const Model& model_;
  const ModelConfig& c_;
  Collective* grads_collective_;
  OverlapStats* stats_;
  // The model's linear-layer weights packed for oneDNN's matmul (on first
  // use; unused when the caller gave its own), and bf16 copies of
  // fast_bf16_ (the bf16 mode), which operands_ carries to the GEMMs.
  cpu::PackedWeights own_packed_;
  cpu::Bf16Copies bf16_copies_;
  const cpu::Operands operands_;
  // The bf16 mode on the bf16 matmul: bf16 activations made as bf16.
  const bool bits_;
  Tensor x_, h_, acc_;                      // [L, D]; h_ empty where bits_ (h16_ holds h)
  std::vector<uint16_t> h16_;               // [L, D], where bits_
  std::vector<uint16_t> reversed16_, y16_;  // a tile of h reversed, of y (bits_)
  std::vector<float> final_normed_;         // OutputRows' normed rows, where bits_
  // The scan state and its scratch.
  MambaState scan_;
  std::vector<float> log_decay_, reversed_, y_;
  // The block's first direction with outputs (-1: none yet), whose outputs
  // are held (float32); columns D and up of its rows ([L, d_inner - D]); a
  // tile of both directions' outputs summed (or, in the bf16 mode, of one
  // direction's projected).
  int held_dir_ = -1;
  std::vector<float> held_high_, summed_;
  cpu::MixerWorkspace mixer_ws_;
  // The fast weights (w0 | w1 | w2) and their gradients.
  std::vector<float> fast_, grads_;
  std::vector<float> fast_bf16_;  // fast_ rounded, in the bf16 mode (its size fixed)
  std::future<absl::Status> reducing_;
  std::vector<SliceScratch> slices_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_OPS_H_
