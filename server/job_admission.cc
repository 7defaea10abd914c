#include "server/job_admission.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/model.h"
#include "common/status_macros.h"
#include "proto/job_options.h"
#include "server/tenant_tokens.h"

namespace lact::server {
namespace {

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

}  // namespace

std::vector<std::pair<int64_t, int64_t>> SplitContext(int64_t total, int parts) {
  std::vector<std::pair<int64_t, int64_t>> shards;
  int64_t begin = 0;
  for (int r = 0; r < parts; ++r) {
    const int64_t n = total / parts + (r < total % parts ? 1 : 0);
    shards.emplace_back(begin, n);
    begin += n;
  }
  return shards;
}

absl::Status CheckQuerySets(const google::protobuf::RepeatedField<int64_t>& tokens,
                            const AdmissionLimits& limits) {
  if (tokens.size() > limits.max_query_sets) {
    return Invalid(absl::StrCat(tokens.size(), " query sets; at most ", limits.max_query_sets,
                                " are allowed"));
  }
  int64_t sum = 0;
  for (int k = 0; k < tokens.size(); ++k) {
    if (tokens[k] < 1)
      return Invalid(absl::StrCat("query set ", k, " has ", tokens[k], " tokens; need >= 1"));
    if (tokens[k] > limits.max_query_tokens - sum) {
      return Invalid(
          absl::StrCat("query sets hold more than ", limits.max_query_tokens, " tokens in all"));
    }
    sum += tokens[k];
  }
  return absl::OkStatus();
}

namespace {

// How many workers the job runs on: JobSpec.workers, or as many as it
// gives shard_tokens, or (0) every healthy worker that holds the model, at
// most one per token.
absl::StatusOr<int> WorkerCount(const v1::JobSpec& spec, int holding, int64_t L) {
  int workers = spec.workers();
  if (spec.shard_tokens_size() > 0) {
    if (workers != 0 && workers != spec.shard_tokens_size()) {
      return Invalid(absl::StrCat("workers ", workers, " disagrees with the ",
                                  spec.shard_tokens_size(), " shard_tokens given"));
    }
    workers = spec.shard_tokens_size();
  }
  if (workers < 0)
    return Invalid(
        absl::StrCat("workers ", workers, " must be >= 0 (0 = all that hold the model)"));
  if (workers == 0) workers = static_cast<int>(std::min<int64_t>(holding, L));
  if (workers < 1)
    return absl::UnavailableError(
        absl::StrCat("no healthy worker holds model '", spec.model(), "'"));
  if (workers > holding) {
    return Invalid(absl::StrCat("the job asks for ", workers, " workers but ", holding,
                                " healthy workers hold model '", spec.model(), "'"));
  }
  if (workers > L) {
    return Invalid(absl::StrCat("cannot shard ", L, " context tokens over ", workers,
                                " workers; each needs at least one token"));
  }
  return workers;
}

// Each rank's (begin, tokens): even, or as shard_tokens says.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> Shards(const v1::JobSpec& spec, int64_t L,
                                                                int workers) {
  std::vector<std::pair<int64_t, int64_t>> shards = SplitContext(L, workers);
  if (spec.shard_tokens_size() == 0) return shards;
  for (int r = 0; r < workers; ++r) {
    if (const int64_t n = spec.shard_tokens(r); n < 1)
      return Invalid(absl::StrCat("shard_tokens[", r, "] = ", n, "; every shard needs >= 1 token"));
  }
  int64_t begin = 0;
  for (int r = 0; r < workers; ++r) {
    const int64_t n = spec.shard_tokens(r);
    if (n > L - begin)
      return Invalid(absl::StrCat("shard_tokens add up to more than context_tokens ", L));
    shards[r] = {begin, n};
    begin += n;
  }
  if (begin != L) {
    return Invalid(absl::StrCat("shard_tokens add up to ", begin, ", not context_tokens ", L));
  }
  return shards;
}

// The model the job names, with the job's options applied.
absl::StatusOr<ModelConfig> JobModel(const v1::JobSpec& spec, const WorkerRegistry& registry) {
  if (spec.model().empty())
    return Invalid("JobSpec.model is empty; ListModels shows the available models");
  const std::string& tenant = spec.tenant();
  if (!ValidTenantName(tenant)) {
    return Invalid(absl::StrCat("JobSpec.tenant '", tenant.substr(0, 80),
                                "' must be at most 64 letters, digits, '-', '_' or '.'"));
  }
  if (absl::Status name = CheckModelName(spec.model()); !name.ok()) return name;
  absl::StatusOr<ModelConfig> model = registry.FindModel(spec.model());
  if (!model.ok()) {
    return model.status().code() == absl::StatusCode::kNotFound
               ? Invalid(std::string(model.status().message()))
               : model.status();
  }
  return *model;
}

}  // namespace

absl::StatusOr<JobPlan> PlanJob(const v1::JobSpec& spec, const WorkerRegistry& registry,
                                const AdmissionLimits& limits) {
  LACT_ASSIGN_OR_RETURN(const ModelConfig model, JobModel(spec, registry));
  JobPlan plan;
  LACT_ASSIGN_OR_RETURN(plan.dtype, FromProto(spec.dtype()));
  absl::StatusOr<ModelConfig> config = ApplyJobOptions(model, FromProto(spec.options()));
  if (!config.ok()) return Invalid(std::string(config.status().message()));
  plan.config = *config;
  const int64_t L = spec.context_tokens();
  if (L < 1 || L > limits.max_context_tokens) {
    return Invalid(absl::StrCat("context_tokens ", L, " is out of range (allowed: 1..",
                                limits.max_context_tokens, ")"));
  }
  if (spec.token_width() != plan.config.input_width()) {
    return Invalid(absl::StrCat("token_width ", spec.token_width(), " does not match model '",
                                spec.model(), "', which takes ", plan.config.input_width(),
                                " features per token"));
  }
  LACT_RETURN_IF_ERROR(CheckQuerySets(spec.query_tokens(), limits));
  LACT_ASSIGN_OR_RETURN(plan.workers, WorkerCount(spec, registry.CountHolding(spec.model()), L));
  constexpr int64_t kMaxRetainSeconds = int64_t{30} * 24 * 3600;
  if (spec.retain_seconds() < 0 || spec.retain_seconds() > kMaxRetainSeconds) {
    return Invalid(absl::StrCat("retain_seconds ", spec.retain_seconds(),
                                " is out of range (allowed: 0..", kMaxRetainSeconds,
                                ", 30 days; 0 = the server default)"));
  }
  LACT_ASSIGN_OR_RETURN(plan.shards, Shards(spec, L, plan.workers));
  return plan;
}

}  // namespace lact::server
