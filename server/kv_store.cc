#include "server/kv_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lact::server {

void KvStore::Set(const std::string& key, std::string value) {
  absl::MutexLock lock(&mu_);  // waiters' conditions are checked as it is released
  values_[key] = std::move(value);
}

absl::StatusOr<std::vector<std::string>> KvStore::Get(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  for (const std::string& key : keys) {
    const auto present = [this, &key]()
                             ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(key) > 0; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&present), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key '", key, "' did not appear within ", timeout.count(), " ms"));
    }
  }
  std::vector<std::string> out;
  for (const std::string& key : keys) out.push_back(values_.at(key));
  return out;
}

void KvStore::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && absl::StartsWith(it->first, prefix);) {
    it = values_.erase(it);
  }
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace lact::server
