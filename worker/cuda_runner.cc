#include "worker/cuda_runner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"
#include "worker/run_tokens.h"

namespace lact {

using cuda::DeviceBuffer;

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(const Model& model, const ModelConfig& config,
                                                               CudaRunOptions options) {
  if (options.tile_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tile of ", options.tile_tokens, " tokens (need >= 1)"));
  }
  auto runner = std::unique_ptr<CudaRunner>(new CudaRunner(model, config, std::move(options)));
  LACT_ASSIGN_OR_RETURN(runner->ctx_, cuda::CudaContext::Create(runner->options_.device, runner->options_.precision));
  LACT_RETURN_IF_ERROR(runner->weights_.Upload(model, *runner->ctx_));
  return runner;
}

absl::StatusOr<Tensor> CudaRunner::RunContext(const Tensor& context, FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, context, "context"));
  *state = ZeroFusedState(config_);
  const int64_t L = context.dim(0);
  return Run(context, /*is_context=*/true, {&local_, nullptr, 0, L, options_.cancelled}, state);
}

absl::StatusOr<Tensor> CudaRunner::RunContextShard(const Tensor& shard, int64_t begin, int64_t total,
                                                   Collective* sync, DeviceAllReduce* grads, FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, shard, "context shard"));
  if (begin < 0 || begin + shard.dim(0) > total) {
    return absl::InvalidArgumentError(absl::StrCat("shard [", begin, ", ", begin + shard.dim(0),
                                                   ") lies outside a context of ", total, " tokens"));
  }
  if (sync->size() > 1 && (grads == nullptr || grads->size() != sync->size())) {
    return absl::InvalidArgumentError("a sharded run needs a gradient all-reduce over the same group");
  }
  *state = ZeroFusedState(config_);
  return Run(shard, /*is_context=*/true, {sync, grads, begin, total, options_.cancelled}, state);
}

absl::StatusOr<Tensor> CudaRunner::RunQuery(const Tensor& query, const FusedState& state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, query, "query set"));
  if (static_cast<int>(state.layers.size()) != config_.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("state has ", state.layers.size(), " layers, the model ",
                                                   config_.n_layers));
  }
  FusedState copy = state;
  const int64_t L = query.dim(0);
  return Run(query, /*is_context=*/false, {&local_, nullptr, 0, L, options_.cancelled}, &copy);
}

absl::Status CudaRunner::Embed(const Tensor& tokens, CudaBlock& block) {
  const ModelConfig& c = config_;
  const int64_t L = tokens.dim(0), D = c.d_model;
  if (model_.embed() == nullptr) {
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block.x(), tokens.ptr(), L * D * sizeof(float),
                                              cudaMemcpyHostToDevice, ctx_->stream()));
    return ctx_->Synchronize();
  }
  const int64_t tile = block.tile();
  LACT_ASSIGN_OR_RETURN(DeviceBuffer in, DeviceBuffer::Allocate(tile * c.d_input));
  for (int64_t t0 = 0; t0 < L; t0 += tile) {
    const int64_t n = std::min(tile, L - t0);
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in.get(), tokens.ptr() + t0 * c.d_input, n * c.d_input * sizeof(float),
                                              cudaMemcpyHostToDevice, ctx_->stream()));
    LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, in.get(), c.d_input, n, c.d_input, weights_(model_.embed()), D,
                                      block.x() + t0 * D, D));
  }
  return ctx_->Synchronize();  // `in` is freed on return
}

absl::StatusOr<Tensor> CudaRunner::Head(CudaBlock& block) {
  const ModelConfig& c = config_;
  const int64_t L = block.tokens(), D = c.d_model, tile = block.tile();
  float* normed = block.h();
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(ctx_->stream(), block.x(), D, L, D, weights_(model_.final_norm()), normed, D));
  Tensor out({L, c.output_width()});
  if (model_.head() == nullptr) {
    LACT_RETURN_IF_ERROR(ctx_->Download(normed, out.size(), out.ptr()));
    return out;
  }
  LACT_ASSIGN_OR_RETURN(DeviceBuffer rows, DeviceBuffer::Allocate(tile * c.d_output));
  for (int64_t t0 = 0; t0 < L; t0 += tile) {
    const int64_t n = std::min(tile, L - t0);
    LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, normed + t0 * D, D, n, D, weights_(model_.head()), c.d_output,
                                      rows.get(), c.d_output));
    LACT_RETURN_IF_ERROR(ctx_->Download(rows.get(), n * c.d_output, out.ptr() + t0 * c.d_output));
  }
  return out;
}

absl::StatusOr<Tensor> CudaRunner::Run(const Tensor& tokens, bool is_context, const CudaShard& shard,
                                       FusedState* state) {
  const ModelConfig& c = config_;
  LACT_RETURN_IF_ERROR(ctx_->Activate());  // the device is per thread in CUDA
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaBlock> block,
                        CudaBlock::Create(c, *ctx_, weights_, shard, tokens.dim(0), options_.tile_tokens));
  LACT_RETURN_IF_ERROR(Embed(tokens, *block));
  const double busy = shard.grads ? shard.grads->busy_seconds() : 0, waited = shard.grads ? shard.grads->waited_seconds() : 0;
  for (int i = 0; i < c.n_layers; ++i) {
    const absl::Status layer = block->Run(model_.layer(i), is_context, &state->layers[i]);
    if (!layer.ok()) {
      return absl::Status(layer.code(), absl::StrCat("layer ", i + 1, " of ", c.n_layers, ": ", layer.message()));
    }
    if (options_.on_layer_done) options_.on_layer_done(i + 1, c.n_layers);
  }
  if (shard.grads != nullptr) {
    overlap_.allreduce_seconds += shard.grads->busy_seconds() - busy;
    overlap_.waited_seconds += shard.grads->waited_seconds() - waited;
  }
  return Head(*block);
}

}  // namespace lact
