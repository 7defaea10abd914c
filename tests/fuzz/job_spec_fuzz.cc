// libFuzzer target: any bytes as the JobSpec a client submits, checked and
// planned by the coordinator's admission (PlanJob) against two workers
// holding preset:small. A plan that is accepted must cover the context
// exactly: one non-empty contiguous shard per worker.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "common/model.h"
#include "google/protobuf/stubs/logging.h"
#include "lact/v1/coordinator.pb.h"
#include "server/job_admission.h"
#include "server/worker_registry.h"

namespace {

lact::server::WorkerRegistry& Registry() {
  static auto* registry = [] {
    auto* r = new lact::server::WorkerRegistry(std::chrono::hours(1));
    const std::map<std::string, lact::ModelConfig> models = {
        {"preset:small", *lact::PresetConfig("small")}};
    if (!r->Register("127.0.0.1:1", "cpu", models).ok() ||
        !r->Register("127.0.0.1:2", "cpu", models).ok()) {
      std::abort();
    }
    return r;
  }();
  return *registry;
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; the fuzzer makes many.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lact::v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  const lact::server::AdmissionLimits limits;
  (void)lact::server::CheckQuerySets(spec.query_tokens(), limits);
  absl::StatusOr<lact::server::JobPlan> plan = lact::server::PlanJob(spec, Registry(), limits);
  if (!plan.ok()) return 0;
  if (plan->workers < 1 || plan->workers > 2 ||
      static_cast<int>(plan->shards.size()) != plan->workers) {
    std::abort();
  }
  int64_t next = 0;
  for (const auto& [begin, tokens] : plan->shards) {
    if (begin != next || tokens < 1) std::abort();
    next += tokens;
  }
  if (next != spec.context_tokens()) std::abort();
  return 0;
}
