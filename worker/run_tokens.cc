#include "worker/run_tokens.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lact {

absl::Status CheckRunTokens(const ModelConfig& config, const Tensor& tokens, const std::string& what) {
  const int64_t width = config.input_width();
  if (tokens.rank() != 2 || tokens.dim(1) != width) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has shape ", ShapeString(tokens.shape),
                                                   "; the model takes [L, ", width, "] tokens"));
  }
  if (tokens.dim(0) < 1) return absl::InvalidArgumentError(absl::StrCat(what, " has no tokens (need L >= 1)"));
  for (int64_t i = 0; i < tokens.size(); ++i) {
    if (!std::isfinite(tokens.data[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has a non-finite value at token ", i / width,
                                                     ", feature ", i % width, " (NaN and Inf are not allowed)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lact
