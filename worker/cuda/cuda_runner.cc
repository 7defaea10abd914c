#include "worker/cuda/cuda_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/cuda/cuda_ops.h"
#include "worker/schedule/block_schedule.h"
#include "worker/schedule/run_tokens.h"

namespace lact {

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(const Model& model,
                                                               const ModelConfig& config,
                                                               const BackendOptions& options,
                                                               RunHooks hooks) {
  return Create(model, config, options, std::move(hooks),
                [&model](cuda::CudaContext& ctx) { return DeviceWeights::Upload(model, ctx); });
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(std::shared_ptr<const Model> model,
                                                               const ModelConfig& config,
                                                               const BackendOptions& options,
                                                               RunHooks hooks,
                                                               DeviceWeightsCache& cache) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                        Create(*model, config, options, std::move(hooks),
                               [&](cuda::CudaContext& ctx) { return cache.Get(model, ctx); }));
  runner->owned_model_ = std::move(model);
  return runner;
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(
    const Model& model, const ModelConfig& config, const BackendOptions& options, RunHooks hooks,
    const std::function<absl::StatusOr<std::shared_ptr<const DeviceWeights>>(cuda::CudaContext&)>&
        weights) {
  if (options.tile_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tile of ", options.tile_tokens, " tokens (need >= 1, or 0 for 65536)"));
  }
  LACT_ASSIGN_OR_RETURN(cuda::Precision precision, cuda::ParsePrecision(options.precision));
  LACT_ASSIGN_OR_RETURN(const cuda::SsdMath scan_math, cuda::ParseSsdMath(options.scan_math));
  const int64_t tile = options.tile_tokens > 0 ? options.tile_tokens : 65536;
  auto runner = std::unique_ptr<CudaRunner>(new CudaRunner(model, config, tile, std::move(hooks)));
  runner->scan_math_ = scan_math;
  LACT_ASSIGN_OR_RETURN(runner->ctx_, cuda::CudaContext::Create(options.device, precision));
  LACT_ASSIGN_OR_RETURN(runner->weights_, weights(*runner->ctx_));
  return runner;
}

absl::StatusOr<Tensor> CudaRunner::RunContext(Tensor context, FusedState* state) {
  // The whole context is the one shard of a group of one.
  const int64_t L = context.rank() >= 1 ? context.dim(0) : 0;
  return RunContextShard(std::move(context), 0, L, &local_, nullptr, state);
}

absl::StatusOr<Tensor> CudaRunner::RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                                   Collective* sync, DeviceAllReduce* grads,
                                                   FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckShard(config_, shard, begin, total));
  if (sync->size() > 1 && (grads == nullptr || grads->size() != sync->size())) {
    return absl::InvalidArgumentError(
        "a sharded run needs a gradient all-reduce over the same group");
  }
  *state = ZeroFusedState(config_);
  return Run(std::move(shard), ContextShard(sync, begin, total, hooks_), grads, nullptr, state);
}

absl::StatusOr<Tensor> CudaRunner::RunQuery(Tensor query, const FusedState& state) {
  LACT_RETURN_IF_ERROR(CheckQuery(config_, query, state));
  const int64_t L = query.dim(0);
  return Run(
      std::move(query),
      {.kind = SequenceKind::kQuery, .sync = &local_, .total = L, .cancelled = hooks_.cancelled},
      nullptr, &state, nullptr);
}

absl::StatusOr<Tensor> CudaRunner::Run(Tensor tokens, const ShardContext& shard,
                                       DeviceAllReduce* grads, const FusedState* kept,
                                       FusedState* out) {
  LACT_RETURN_IF_ERROR(ctx_->Activate());  // the device is per thread in CUDA
  LACT_ASSIGN_OR_RETURN(
      std::unique_ptr<CudaOps> ops,
      CudaOps::Create(model_, config_, *ctx_, *weights_, tokens.dim(0), tile_, grads, scan_math_));
  const double busy = grads ? grads->busy_seconds() : 0;
  const double waited = grads ? grads->waited_seconds() : 0;
  absl::StatusOr<Tensor> rows =
      RunModel(model_, config_, shard, std::move(tokens), *ops, kept, out, hooks_.on_layer_done);
  if (grads != nullptr) {
    overlap_.allreduce_seconds += grads->busy_seconds() - busy;
    overlap_.waited_seconds += grads->waited_seconds() - waited;
  }
  return rows;
}

}  // namespace lact
