// The one runner of the model, whatever the backend: it checks what it is
// given (run_tokens.h), starts a context's fused state, and runs the one
// schedule (RunModel, block_schedule.h) over the ops its backend makes for
// each sequence. CpuRunner and CudaRunner are this with their ops; `Grads`
// is their gradient all-reduce (a Collective on the CPU, a
// DeviceAllReduce on a GPU: anything with size()). A runner may be reused
// for many sequences but not from two threads at once.
#ifndef LACT_WORKER_SCHEDULE_MODEL_RUNNER_H_
#define LACT_WORKER_SCHEDULE_MODEL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "worker/collective/collective.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/block_schedule.h"
#include "worker/schedule/run_tokens.h"
#include "worker/schedule/shard.h"
#include "worker/schedule/stage_profile.h"

namespace lact {

// A backend's ops for one sequence, and the model they run (the CPU's
// bf16 mode runs its rounded weights).
struct SequenceOps {
  const Model* model = nullptr;
  std::unique_ptr<BackendOps> ops;
  std::function<void()> after;  // once the sequence has run; may be null
};

template <typename Grads>
class ModelRunner {
 public:
  // Ops for a sequence of `rows` tokens, with the context's gradient
  // all-reduce (null for a query set or a group of one).
  using MakeOps = std::function<absl::StatusOr<SequenceOps>(int64_t rows, Grads* grads)>;

  // `config`: the model's config with the job's overrides.
  ModelRunner(const ModelConfig& config, RunHooks hooks, MakeOps make_ops)
      : config_(config), hooks_(std::move(hooks)), make_ops_(std::move(make_ops)) {}

  // context: [L, d_input or D], consumed. Its output rows, and *state.
  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state) {
    // The whole context is the one shard of a group of one.
    const int64_t L = context.rank() >= 1 ? context.dim(0) : 0;
    return RunContextShard(std::move(context), 0, L, &local_, nullptr, state);
  }
  // This rank's contiguous shard [begin, begin + L) of a context of
  // `total` tokens: `sync` carries the halos and summaries, `grads` the
  // gradient all-reduce of the same group. Every rank gets the same
  // *state; the rows returned are the shard's (empty when the hooks'
  // on_output_rows takes them tile by tile).
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         Collective* sync, Grads* grads, FusedState* state) {
    LACT_RETURN_IF_ERROR(CheckShard(config_, shard, begin, total));
    if (sync->size() > 1 && (grads == nullptr || grads->size() != sync->size())) {
      return absl::InvalidArgumentError(
          "a sharded run needs a gradient all-reduce over the same group");
    }
    *state = ZeroFusedState(config_);
    return Run(std::move(shard), ContextShard(sync, begin, total, hooks_), grads, nullptr, state);
  }
  // query: [L_q, d_input or D], against a context's fused state.
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) {
    LACT_RETURN_IF_ERROR(CheckQuery(config_, query, state));
    const int64_t L = query.dim(0);
    return Run(
        std::move(query),
        {.kind = SequenceKind::kQuery, .sync = &local_, .total = L, .cancelled = hooks_.cancelled},
        nullptr, &state, nullptr);
  }

  const ModelConfig& config() const { return config_; }

 private:
  absl::StatusOr<Tensor> Run(Tensor tokens, const ShardContext& shard, Grads* grads,
                             const FusedState* kept, FusedState* out) {
    LACT_ASSIGN_OR_RETURN(SequenceOps sequence, make_ops_(tokens.dim(0), grads));
    std::unique_ptr<Collective> timed_exchange;
    ShardContext timed_shard = shard;
    if (hooks_.profile != nullptr) {
      sequence.ops = Profiled(std::move(sequence.ops), hooks_.profile);
      timed_shard = Profiled(shard, hooks_.profile, &timed_exchange);
    }
    absl::StatusOr<Tensor> rows = RunModel(*sequence.model, config_, timed_shard, std::move(tokens),
                                           *sequence.ops, kept, out, hooks_.on_layer_done);
    if (sequence.after) sequence.after();
    return rows;
  }

  const ModelConfig config_;
  const RunHooks hooks_;
  const MakeOps make_ops_;
  LocalCollective local_;
};

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_MODEL_RUNNER_H_
