// The CPU backend's BackendOps (backend_ops.h) on the kernels of
// kernels/cpu: a facade that embeds the tokens, norms each block's input
// and makes the output rows, over one part per sub-algorithm (the BiMamba
// mixer, cpu_mixer_ops.h; LaCT's fast weights, cpu_lact_ops.h; the MLP,
// cpu_mlp_ops.h) sharing host activations and one precision policy
// (cpu_precision.h). The model must outlive the ops unchanged (its weights
// are packed once); with cpu::Operands::kBf16 its GEMM weights must come
// rounded to bf16 (RoundGemmWeightsToBf16). One thread drives the ops.
#ifndef LACT_WORKER_CPU_CPU_OPS_H_
#define LACT_WORKER_CPU_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "kernels/cpu/blas.h"
#include "worker/collective/collective.h"
#include "worker/cpu/cpu_lact_ops.h"
#include "worker/cpu/cpu_mixer_ops.h"
#include "worker/cpu/cpu_mlp_ops.h"
#include "worker/cpu/cpu_precision.h"
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

  absl::Status LoadTokens(Tensor tokens) override;
  absl::Status OutputRows(int64_t first, int64_t n, float* out) override;
  std::shared_ptr<Tensor> OutputBuffer(int64_t width) override;
  absl::Status ReadRows(Activation a, int64_t first, int64_t n, float* out) override;
  absl::Status BeginBlock(const LayerWeights& w) override;

  absl::Status LoadScanState(const MambaState& state) override {
    mixer_.LoadScanState(state);
    return absl::OkStatus();
  }
  absl::Status StoreScanState(MambaState* state, float* log_decay) override {
    mixer_.StoreScanState(state, log_decay);
    return absl::OkStatus();
  }
  absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) override {
    mixer_.Tile(w, dir, first, n, outputs, summarize);
    return absl::OkStatus();
  }

  absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) override {
    lact_.Load(w, retained);
    return absl::OkStatus();
  }
  absl::Status StoreFastWeights(LayerState* state) override {
    lact_.Store(state);
    return absl::OkStatus();
  }
  absl::Status ZeroGrads() override {
    lact_.ZeroGrads();
    return absl::OkStatus();
  }
  absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) override {
    lact_.Accumulate(w, first, n);
    return absl::OkStatus();
  }
  absl::Status StartGradAllReduce() override { return lact_.StartAllReduce(); }
  absl::Status FinishGradAllReduce() override { return lact_.FinishAllReduce(); }
  absl::Status UpdateFastWeights(const LayerWeights& w) override {
    lact_.Update(w);
    return absl::OkStatus();
  }
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) override {
    lact_.Apply(w, first, n);
    return absl::OkStatus();
  }

  absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) override {
    mlp_.Residual(w, first, n);
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }

 private:
  const Model& model_;
  const ModelConfig& c_;
  CpuPrecision precision_;
  CpuActivations rows_;
  std::vector<float> final_normed_;  // OutputRows' normed rows
  CpuMixerOps mixer_;
  CpuLactOps lact_;
  CpuMlpOps mlp_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_OPS_H_
