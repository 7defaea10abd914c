// Runs the model of docs/model.md on the CPU: the one runner
// (model_runner.h) over CpuOps, tiled over tokens. RunContext() makes a
// context's outputs and fused state, RunQuery() runs a query set against
// one, RunContextShard() runs this rank's shard with its group (`sync`:
// halos and summaries; `grads`: the gradient all-reduce). Precision "bf16"
// gives its GEMMs bf16-rounded operands with float32 accumulation, the CUDA
// backend's contract. Inputs are validated (run_tokens.h); errors are
// statuses. Reusable for many sequences, from one thread at a time.
#ifndef LACT_WORKER_CPU_CPU_RUNNER_H_
#define LACT_WORKER_CPU_CPU_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/packed_weights.h"
#include "worker/collective/collective.h"
#include "worker/schedule/model_runner.h"
#include "worker/schedule/shard.h"

namespace lact {

// A copy of `model` whose GEMM weights (the projections, the MLP, the
// embedding and the head) are rounded to bf16; norms, biases, the conv and
// SSM parameters and the initial fast weights are unchanged.
absl::StatusOr<Model> RoundGemmWeightsToBf16(const Model& model);

// The same, made once per shared model in this process and kept while
// `model` lives (a worker runs many jobs of the models its cache keeps;
// preset:base's copy takes seconds and 0.9 GiB). Thread-safe; a caller
// that finds the copy being made waits for it.
absl::StatusOr<std::shared_ptr<const Model>> SharedBf16Weights(
    const std::shared_ptr<const Model>& model);

// How the CPU backend runs --precision bf16 on this machine, for logs: on
// the CPU's bf16 units through oneDNN (cpu::Bf16MatmulOn()), or, where it
// has none, as an emulation (bf16-rounded operands, float32 GEMMs) and why.
std::string CpuBf16Mode();

// Tokens a layer's ops take at a time when BackendOptions::tile_tokens is
// 0, by precision ("fp32" or "bf16"): small enough that a tile's
// projections, scans and MLP hidden states stay in cache (the measured
// choice: docs/performance.md, The CPU layer).
constexpr int64_t kDefaultCpuTileTokens = 1024;
constexpr int64_t kDefaultCpuBf16TileTokens = 512;
int64_t DefaultCpuTileTokens(std::string_view precision);

class CpuRunner {
 public:
  // `config` is the model's config with the job's overrides applied; only
  // ttt.muon_steps and ttt.chunk_tokens may differ from model.config().
  // Of `options`, threads, tile_tokens and precision ("fp32" or "bf16";
  // ValidateBackend checks it) are used.
  // In the bf16 mode `bf16_weights`, if given, is `model` rounded
  // (SharedBf16Weights); else the runner rounds its own copy at first use.
  CpuRunner(const Model& model, const ModelConfig& config, const BackendOptions& options = {},
            RunHooks hooks = {}, std::shared_ptr<const Model> bf16_weights = nullptr);

  // context: [L, d_input or D], consumed. Returns [L, d_output or D] and
  // fills *state.
  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state) {
    return runner_.RunContext(std::move(context), state);
  }
  // This rank's contiguous shard [begin, begin + L) of a context of `total`
  // tokens. Every rank gets the same *state; the rows returned are the
  // shard's (empty when the hooks' on_output_rows takes them tile by tile).
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         Collective* sync, Collective* grads, FusedState* state) {
    return runner_.RunContextShard(std::move(shard), begin, total, sync, grads, state);
  }
  // query: [L_q, d_input or D]. `state` as produced by RunContext.
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) {
    return runner_.RunQuery(std::move(query), state);
  }

  // Gradient all-reduce time and the part of it not hidden, summed over runs.
  const OverlapStats& overlap() const { return overlap_; }

 private:
  // CpuOps for a sequence of `rows` tokens, on this runner's threads and
  // weights (rounded at first use in the bf16 mode, unless given).
  absl::StatusOr<SequenceOps> Ops(int64_t rows, Collective* grads);

  const Model& model_;
  cpu::Operands operands_;
  std::shared_ptr<const Model> rounded_;  // the bf16 mode's weights
  // The weights packed for the matmul once for all of this runner's
  // sequences (a context and the queries against it).
  cpu::PackedWeights packed_;
  int threads_;
  int64_t tile_;
  OverlapStats overlap_;
  ModelRunner<Collective> runner_;  // last: its ops use the rest
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_RUNNER_H_
