// The coordinator's small key-value store where a job's workers meet
// (Gloo rendezvous), bounded in key, value and total size. Keys are
// JOB/ATTEMPT/...: only the attempt of a job that runs now may set or wait
// for keys, so the shards of an attempt that died never meet (or set keys
// for) the next one, and their waits end at once. Thread-safe. Get() waits
// for keys up to a timeout.
#ifndef LACT_SERVER_KV_STORE_H_
#define LACT_SERVER_KV_STORE_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lact::server {

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = size_t{64} << 10;

  // At most `max_bytes` of keys and values in all.
  explicit KvStore(size_t max_bytes = size_t{64} << 20) : max_bytes_(max_bytes) {}

  // INVALID_ARGUMENT for a key or value over its limit, RESOURCE_EXHAUSTED
  // when the store would hold more than its bytes (each naming the limit).
  absl::Status Set(const std::string& key, std::string value);
  // The values of all keys, waiting until each exists; DEADLINE_EXCEEDED
  // naming the first missing key after `timeout`.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout);
  // From now on `attempt` is the attempt of `job_id` that runs: the job's
  // earlier keys go, and keys of its other attempts are FAILED_PRECONDITION.
  void BeginAttempt(const std::string& job_id, int attempt);
  // The job has ended: its keys go, and keys of it are refused from now on.
  void EndJob(const std::string& job_id);
  size_t size() const;

 private:
  // OK if `key` belongs to the attempt of its job that runs now.
  absl::Status CheckAttempt(const std::string& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseJobLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  const size_t max_bytes_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> attempts_ ABSL_GUARDED_BY(mu_);  // job -> the attempt running
};

}  // namespace lact::server

#endif  // LACT_SERVER_KV_STORE_H_
