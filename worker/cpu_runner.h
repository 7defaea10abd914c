// Runs the model of SPEC.md on one whole sequence on the CPU (float32,
// OpenBLAS + OpenMP), tiled over tokens so that working memory beyond three
// [L, D] activation buffers stays at a few tiles.
//
// RunContext() runs a context and produces the fused state; RunQuery() runs
// a query set against a fused state (SPEC section 3: the forward Mamba
// direction continues from the context's state, LaCT applies the final fast
// weights). Inputs are validated (shape, width, non-empty, finite) and bad
// ones return INVALID_ARGUMENT naming the problem. A runner may be reused for
// many sequences but not from two threads at once.
#ifndef LACT_WORKER_CPU_RUNNER_H_
#define LACT_WORKER_CPU_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/collective.h"
#include "worker/cpu_block.h"

namespace lact {

struct RunOptions {
  int threads = 0;             // 0: all cores
  int64_t tile_tokens = 4096;  // tokens per tile
  // Called after each layer with (layers done, layers in all).
  std::function<void(int, int)> on_layer_done;
  // Polled between layers; true stops the run with CANCELLED.
  std::function<bool()> cancelled;
};

class CpuRunner {
 public:
  // `config` is the model's config with the job's overrides applied; only
  // ttt.muon_steps and ttt.chunk_tokens may differ from model.config().
  CpuRunner(const Model& model, const ModelConfig& config, RunOptions options);

  // context: [L, d_input or D], consumed. Returns [L, d_output or D] and
  // fills *state.
  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state);

  // This rank's contiguous shard [begin, begin + L) of a context of `total`
  // tokens, run together with the other ranks of `sync`/`grads` (two
  // collectives of the same group; see cpu_block.h). Every rank gets the
  // same *state; the returned rows are this shard's output.
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total, Collective* sync,
                                         Collective* grads, FusedState* state);

  // query: [L_q, d_input or D]. `state` as produced by RunContext.
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state);

  // Gradient all-reduce time and the part of it not hidden, summed over runs.
  const OverlapStats& overlap() const { return overlap_; }

 private:
  absl::StatusOr<Tensor> Run(Tensor tokens, bool is_context, const ShardContext& shard, FusedState* state);

  const Model& model_;
  ModelConfig config_;
  RunOptions options_;
  LocalCollective local_;
  OverlapStats overlap_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_RUNNER_H_
