#include "worker/cpu/cpu_runner.h"

#include <utility>

#include "common/status_macros.h"
#include "kernels/cpu/threading.h"
#include "worker/cpu/cpu_ops.h"
#include "worker/schedule/block_schedule.h"
#include "worker/schedule/run_tokens.h"

namespace lact {

CpuRunner::CpuRunner(const Model& model, const ModelConfig& config, const BackendOptions& options,
                     RunHooks hooks)
    : model_(model),
      config_(config),
      threads_(options.threads),
      tile_(options.tile_tokens > 0 ? options.tile_tokens : 4096),
      hooks_(std::move(hooks)) {}

absl::StatusOr<Tensor> CpuRunner::RunContext(Tensor context, FusedState* state) {
  // The whole context is the one shard of a group of one.
  const int64_t L = context.rank() >= 1 ? context.dim(0) : 0;
  return RunContextShard(std::move(context), 0, L, &local_, nullptr, state);
}

absl::StatusOr<Tensor> CpuRunner::RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                                  Collective* sync, Collective* grads,
                                                  FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckShard(config_, shard, begin, total));
  *state = ZeroFusedState(config_);
  return Run(std::move(shard),
             {.sync = sync, .begin = begin, .total = total, .cancelled = hooks_.cancelled}, grads,
             nullptr, state);
}

absl::StatusOr<Tensor> CpuRunner::RunQuery(Tensor query, const FusedState& state) {
  LACT_RETURN_IF_ERROR(CheckQuery(config_, query, state));
  const int64_t L = query.dim(0);
  return Run(
      std::move(query),
      {.kind = SequenceKind::kQuery, .sync = &local_, .total = L, .cancelled = hooks_.cancelled},
      nullptr, &state, nullptr);
}

absl::StatusOr<Tensor> CpuRunner::Run(Tensor tokens, const ShardContext& shard, Collective* grads,
                                      const FusedState* kept, FusedState* out) {
  cpu::SetNumThreads(threads_);
  CpuOps ops(model_, config_, tokens.dim(0), tile_, grads, &overlap_);
  return RunModel(model_, config_, shard, std::move(tokens), ops, kept, out, hooks_.on_layer_done);
}

}  // namespace lact
