// The fused states this worker computed, kept for RunQuery until their TTL
// (rank 0 of a job keeps its state: it stays where it was computed until a
// query needs it). Expired states are dropped on every Put and Get.
// Thread-safe.
#ifndef LACT_WORKER_RETAINED_STATES_H_
#define LACT_WORKER_RETAINED_STATES_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/fused_state.h"
#include "lact/v1/common.pb.h"

namespace lact {

struct RetainedState {
  std::string model;
  v1::JobOptions options;
  std::shared_ptr<const FusedState> state;
};

class RetainedStates {
 public:
  void Put(const std::string& job_id, RetainedState state, std::chrono::seconds ttl);
  // NOT_FOUND when this worker holds no state for the job (never computed
  // here, or expired).
  absl::StatusOr<RetainedState> Get(const std::string& job_id);

 private:
  struct Entry {
    RetainedState retained;
    std::chrono::steady_clock::time_point expires;
  };
  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, Entry> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_WORKER_RETAINED_STATES_H_
