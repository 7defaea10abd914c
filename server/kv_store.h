// The coordinator's small key-value store where a job's workers meet
// (Gloo rendezvous). Thread-safe. Get() waits for keys up to a timeout.
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
  void Set(const std::string& key, std::string value);
  // The values of all keys, waiting until each exists; DEADLINE_EXCEEDED
  // naming the first missing key after `timeout`.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout);
  // Removes every key starting with `prefix` (a finished job's keys).
  void ErasePrefix(const std::string& prefix);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact::server

#endif  // LACT_SERVER_KV_STORE_H_
