// The fused states this worker computed, kept for RunQuery until their TTL
// (rank 0 of a job keeps its state: it stays where it was computed until a
// query needs it), within a byte cap: a Put that would exceed it evicts
// the oldest states first. Expired states are dropped on every Put and Get;
// a Get for an evicted or expired state says which (the last 4,096 such
// jobs are remembered). Thread-safe.
#ifndef LACT_WORKER_RETAINED_STATES_H_
#define LACT_WORKER_RETAINED_STATES_H_

#include <chrono>
#include <deque>
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
  explicit RetainedStates(int64_t max_bytes = int64_t{8} << 30) : max_bytes_(max_bytes) {}

  void Put(const std::string& job_id, RetainedState state, std::chrono::seconds ttl);
  // NOT_FOUND when this worker holds no state for the job: never computed
  // here, expired, or evicted by the byte cap (the message says which).
  absl::StatusOr<RetainedState> Get(const std::string& job_id);
  int64_t bytes() const;

 private:
  struct Entry {
    RetainedState retained;
    std::chrono::steady_clock::time_point expires;
    int64_t bytes = 0;
    uint64_t order = 0;  // of its Put, for eviction oldest first
  };
  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(std::map<std::string, Entry>::iterator it, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> states_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> dropped_ ABSL_GUARDED_BY(mu_);  // job -> why, the last few
  std::deque<std::string> dropped_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_WORKER_RETAINED_STATES_H_
