// Caps on calls that wait on their client while they hold a thread (a
// Query waiting for its Transfer stream): at most `max_calls` per key (a
// tenant, or one key for a whole worker) at once. A call past the cap is
// refused with RESOURCE_EXHAUSTED naming the cap and the flag that sets
// it. Safe from any thread.
#ifndef LACT_COMMON_CALL_CAPS_H_
#define LACT_COMMON_CALL_CAPS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace lact {

class CallCaps {
 public:
  // `what`: the calls counted, as an error names them ("Query calls");
  // `key_kind`: what a key is ("tenant"); `flag`: the flag that sets
  // `max_calls`.
  CallCaps(int max_calls, std::string what, std::string key_kind, std::string flag)
      : max_calls_(max_calls),
        what_(std::move(what)),
        key_kind_(std::move(key_kind)),
        flag_(std::move(flag)) {}

  // Counts a call of `key`; RESOURCE_EXHAUSTED when `key` already has
  // max_calls. Each OK is paired with one Leave.
  absl::Status Enter(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    int& calls = calls_[key];
    if (calls >= max_calls_) {
      const std::string whose = key.empty() ? "" : absl::StrCat(" of ", key_kind_, " '", key, "'");
      return absl::ResourceExhaustedError(absl::StrCat(max_calls_, " ", what_, whose,
                                                       " already run, the most allowed (", flag_,
                                                       "); retry once one has ended"));
    }
    ++calls;
    return absl::OkStatus();
  }
  void Leave(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(key);
    if (it != calls_.end() && --it->second <= 0) calls_.erase(it);
  }

 private:
  const int max_calls_;
  const std::string what_;
  const std::string key_kind_;
  const std::string flag_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_COMMON_CALL_CAPS_H_
