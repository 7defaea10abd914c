#include "worker/retained_states.h"

#include "absl/strings/str_cat.h"

namespace lact {

void RetainedStates::Put(const std::string& job_id, RetainedState state, std::chrono::seconds ttl) {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  states_[job_id] = Entry{std::move(state), std::chrono::steady_clock::now() + ttl};
}

absl::StatusOr<RetainedState> RetainedStates::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  auto it = states_.find(job_id);
  if (it == states_.end()) {
    return absl::NotFoundError(absl::StrCat("this worker holds no fused state of job '", job_id, "' (expired?)"));
  }
  return it->second.retained;
}

void RetainedStates::ExpireLocked() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = states_.begin(); it != states_.end();) {
    it = it->second.expires <= now ? states_.erase(it) : std::next(it);
  }
}

}  // namespace lact
