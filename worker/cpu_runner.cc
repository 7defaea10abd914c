#include "worker/cpu_runner.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"
#include "worker/run_tokens.h"

namespace lact {

CpuRunner::CpuRunner(const Model& model, const ModelConfig& config, RunOptions options)
    : model_(model), config_(config), options_(std::move(options)) {
  if (options_.tile_tokens < 1) options_.tile_tokens = 4096;
}

absl::StatusOr<Tensor> CpuRunner::RunContext(Tensor context, FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, context, "context"));
  *state = ZeroFusedState(config_);
  const int64_t L = context.dim(0);
  return Run(std::move(context), /*is_context=*/true, {&local_, &local_, 0, L, options_.cancelled}, state);
}

absl::StatusOr<Tensor> CpuRunner::RunContextShard(Tensor shard, int64_t begin, int64_t total, Collective* sync,
                                                  Collective* grads, FusedState* state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, shard, "context shard"));
  if (begin < 0 || begin + shard.dim(0) > total) {
    return absl::InvalidArgumentError(absl::StrCat("shard [", begin, ", ", begin + shard.dim(0),
                                                   ") lies outside a context of ", total, " tokens"));
  }
  *state = ZeroFusedState(config_);
  return Run(std::move(shard), /*is_context=*/true, {sync, grads, begin, total, options_.cancelled}, state);
}

absl::StatusOr<Tensor> CpuRunner::RunQuery(Tensor query, const FusedState& state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config_, query, "query set"));
  if (static_cast<int>(state.layers.size()) != config_.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("state has ", state.layers.size(), " layers, the model ",
                                                   config_.n_layers));
  }
  FusedState copy = state;  // small: the block reads it as scratch for the scans
  const int64_t L = query.dim(0);
  return Run(std::move(query), /*is_context=*/false, {&local_, &local_, 0, L, options_.cancelled}, &copy);
}

absl::StatusOr<Tensor> CpuRunner::Run(Tensor tokens, bool is_context, const ShardContext& shard,
                                      FusedState* state) {
  cpu::SetNumThreads(options_.threads);
  const ModelConfig& c = config_;
  const int64_t L = tokens.dim(0), D = c.d_model;
  Tensor x;
  if (model_.embed() != nullptr) {
    x = Tensor({L, D});
    cpu::Linear(tokens.ptr(), c.d_input, L, c.d_input, model_.embed(), D, x.ptr(), D);
    tokens = Tensor();
  } else {
    x = std::move(tokens);
  }
  BlockBuffers buffers;
  for (int i = 0; i < c.n_layers; ++i) {
    LACT_RETURN_IF_ERROR(RunBlockCpu(c, model_.layer(i), is_context, options_.tile_tokens, shard, &x, &buffers,
                                     &state->layers[i], &overlap_));
    if (options_.on_layer_done) options_.on_layer_done(i + 1, c.n_layers);
    if (options_.cancelled && options_.cancelled()) {
      return absl::CancelledError(absl::StrCat("cancelled after layer ", i + 1, " of ", c.n_layers));
    }
  }
  buffers.acc = Tensor();
  Tensor normed = std::move(buffers.h);
  cpu::RmsNormRows(x.ptr(), D, L, D, model_.final_norm(), normed.ptr(), D);
  if (model_.head() == nullptr) return normed;
  Tensor out({L, c.d_output});
  cpu::Linear(normed.ptr(), D, L, D, model_.head(), c.d_output, out.ptr(), c.d_output);
  return out;
}

}  // namespace lact
