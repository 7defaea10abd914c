// The check every runner makes of the tokens it is given.
#ifndef LACT_WORKER_RUN_TOKENS_H_
#define LACT_WORKER_RUN_TOKENS_H_

#include <string>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace lact {

// OK for [L >= 1, config.input_width()] finite tokens; otherwise
// INVALID_ARGUMENT naming `what` and the problem.
absl::Status CheckRunTokens(const ModelConfig& config, const Tensor& tokens, const std::string& what);

}  // namespace lact

#endif  // LACT_WORKER_RUN_TOKENS_H_
