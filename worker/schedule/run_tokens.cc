#include "worker/schedule/run_tokens.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/token_codec.h"

namespace lact {

absl::Status CheckRunTokens(const ModelConfig& config, const Tensor& tokens,
                            const std::string& what) {
  const int64_t width = config.input_width();
  if (tokens.rank() != 2 || tokens.dim(1) != width) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has shape ", ShapeString(tokens.shape),
                                                   "; the model takes [L, ", width, "] tokens"));
  }
  if (tokens.dim(0) < 1)
    return absl::InvalidArgumentError(absl::StrCat(what, " has no tokens (need L >= 1)"));
  if (absl::Status finite = CheckFinite(tokens.ptr(), tokens.size(), width, 0); !finite.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", finite.message()));
  return absl::OkStatus();
}

absl::Status CheckShard(const ModelConfig& config, const Tensor& shard, int64_t begin,
                        int64_t total) {
  const bool whole = begin == 0 && shard.rank() >= 1 && shard.dim(0) == total;
  LACT_RETURN_IF_ERROR(CheckRunTokens(config, shard, whole ? "context" : "context shard"));
  if (begin < 0 || begin + shard.dim(0) > total) {
    return absl::InvalidArgumentError(absl::StrCat("shard [", begin, ", ", begin + shard.dim(0),
                                                   ") lies outside a context of ", total,
                                                   " tokens"));
  }
  return absl::OkStatus();
}

absl::Status CheckQuery(const ModelConfig& config, const Tensor& query, const FusedState& state) {
  LACT_RETURN_IF_ERROR(CheckRunTokens(config, query, "query set"));
  if (static_cast<int>(state.layers.size()) != config.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("state has ", state.layers.size(), " layers, the model ", config.n_layers));
  }
  return absl::OkStatus();
}

}  // namespace lact
