// Runs the model of SPEC.md on the CPU (float32, OpenBLAS + OpenMP): the
// one schedule (block_schedule.h) over CpuOps, tiled over tokens so that
// working memory beyond three [L, D] activations stays at a few tiles.
//
// RunContext() runs a context and produces the fused state; RunQuery() runs
// a query set against a fused state (SPEC section 3: the forward Mamba
// direction continues from the context's state, LaCT applies the final fast
// weights). RunContextShard() runs this rank's shard with its group: `sync`
// carries the halos and summaries, `grads` the gradient all-reduce (two
// collectives of the same group). Inputs are validated (run_tokens.h). A
// runner may be reused for many sequences but not from two threads at once.
#ifndef LACT_WORKER_CPU_CPU_RUNNER_H_
#define LACT_WORKER_CPU_CPU_RUNNER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/collective/collective.h"
#include "worker/schedule/shard.h"

namespace lact {

class CpuRunner {
 public:
  // `config` is the model's config with the job's overrides applied; only
  // ttt.muon_steps and ttt.chunk_tokens may differ from model.config().
  // Of `options`, threads and tile_tokens are used.
  CpuRunner(const Model& model, const ModelConfig& config, const BackendOptions& options = {},
            RunHooks hooks = {});

  // context: [L, d_input or D], consumed. Returns [L, d_output or D] and
  // fills *state.
  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state);
  // This rank's contiguous shard [begin, begin + L) of a context of `total`
  // tokens. Every rank gets the same *state; the rows returned are the shard's.
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         Collective* sync, Collective* grads, FusedState* state);
  // query: [L_q, d_input or D]. `state` as produced by RunContext.
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state);

  // Gradient all-reduce time and the part of it not hidden, summed over runs.
  const OverlapStats& overlap() const { return overlap_; }

 private:
  absl::StatusOr<Tensor> Run(Tensor tokens, const ShardContext& shard, Collective* grads,
                             const FusedState* kept, FusedState* out);

  const Model& model_;
  ModelConfig config_;
  int threads_;
  int64_t tile_;
  RunHooks hooks_;
  LocalCollective local_;
  OverlapStats overlap_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_RUNNER_H_
