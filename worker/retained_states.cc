#include "worker/retained_states.h"

#include "absl/strings/str_cat.h"

namespace lact {
namespace {

constexpr size_t kRememberedDrops = 4096;

int64_t StateBytes(const FusedState& state) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : FusedStateTensors(state)) bytes += tensor->size() * 4;
  return bytes;
}

}  // namespace

void RetainedStates::Put(const std::string& job_id, RetainedState state, std::chrono::seconds ttl) {
  const int64_t bytes = StateBytes(*state.state);
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  if (auto it = states_.find(job_id); it != states_.end()) DropLocked(it, "replaced");
  while (!states_.empty() && bytes_ + bytes > max_bytes_) {
    auto oldest = states_.begin();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (it->second.order < oldest->second.order) oldest = it;
    }
    DropLocked(oldest, absl::StrCat("evicted: the worker's states reached its --retain-bytes ", max_bytes_,
                                    " and this was the oldest"));
  }
  states_[job_id] = Entry{std::move(state), std::chrono::steady_clock::now() + ttl, bytes, ++puts_};
  bytes_ += bytes;
}

absl::StatusOr<RetainedState> RetainedStates::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  auto it = states_.find(job_id);
  if (it != states_.end()) return it->second.retained;
  auto dropped = dropped_.find(job_id);
  return absl::NotFoundError(absl::StrCat("this worker holds no fused state of job '", job_id, "'",
                                          dropped != dropped_.end() ? absl::StrCat(" (", dropped->second, ")")
                                                                    : std::string(" (never computed here)")));
}

int64_t RetainedStates::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void RetainedStates::ExpireLocked() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = states_.begin(); it != states_.end();) {
    auto next = std::next(it);
    if (it->second.expires <= now) DropLocked(it, "expired: its retention time passed");
    it = next;
  }
}

void RetainedStates::DropLocked(std::map<std::string, Entry>::iterator it, const std::string& why) {
  bytes_ -= it->second.bytes;
  if (dropped_.emplace(it->first, why).second) dropped_order_.push_back(it->first);
  if (dropped_order_.size() > kRememberedDrops) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
  states_.erase(it);
}

}  // namespace lact
