// The checks every runner makes of what it is given: the tokens, a shard's
// place in its context, a query's fused state. Each returns OK or
// INVALID_ARGUMENT naming the problem.
#ifndef LACT_WORKER_SCHEDULE_RUN_TOKENS_H_
#define LACT_WORKER_SCHEDULE_RUN_TOKENS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/fused_state.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace lact {

// OK for [L >= 1, config.input_width()] finite tokens; `what` names them.
absl::Status CheckRunTokens(const ModelConfig& config, const Tensor& tokens,
                            const std::string& what);

// A context shard's tokens, and [begin, begin + L) inside [0, total).
absl::Status CheckShard(const ModelConfig& config, const Tensor& shard, int64_t begin,
                        int64_t total);

// A query set's tokens, and a state with the model's layers.
absl::Status CheckQuery(const ModelConfig& config, const Tensor& query, const FusedState& state);

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_RUN_TOKENS_H_
