// Checks a JobSpec before a byte of tokens is accepted and plans the job:
// the effective model config, the number of workers and the contiguous
// shard of the context each one gets. Every rejection is INVALID_ARGUMENT
// (or UNAVAILABLE when no worker holds the model) with a message that says
// what was asked and what is allowed.
#ifndef LACT_SERVER_JOB_ADMISSION_H_
#define LACT_SERVER_JOB_ADMISSION_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.pb.h"
#include "server/worker_registry.h"

namespace lact::server {

struct AdmissionLimits {
  int64_t max_context_tokens = int64_t{1} << 24;
  int64_t max_query_tokens = int64_t{1} << 22;  // over all query sets of a job
  int max_query_sets = 64;
};

struct JobPlan {
  ModelConfig config;  // with the job's overrides
  WireType dtype;
  int workers;
  std::vector<std::pair<int64_t, int64_t>> shards;  // (begin, tokens) per rank
};

// `total` tokens in `parts` contiguous shards whose sizes differ by at most 1.
std::vector<std::pair<int64_t, int64_t>> SplitContext(int64_t total, int parts);

absl::Status CheckQuerySets(const google::protobuf::RepeatedField<int64_t>& tokens,
                            const AdmissionLimits& limits);

absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec, const WorkerRegistry& registry,
                                const AdmissionLimits& limits);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_ADMISSION_H_
