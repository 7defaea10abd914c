// The coordinator's small key-value store where a job's workers meet
// (Gloo rendezvous), bounded in key, value and total size. Thread-safe.
// Get() waits for keys up to a timeout.
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
  // Removes every key starting with `prefix` (a finished job's keys).
  void ErasePrefix(const std::string& prefix);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  const size_t max_bytes_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact::server

#endif  // LACT_SERVER_KV_STORE_H_
