#include "server/kv_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lact::server {

void KvStore::Set(const std::string& key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = std::move(value);
  }
  changed_.notify_all();
}

absl::StatusOr<std::vector<std::string>> KvStore::Get(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    if (!changed_.wait_until(lock, deadline, [&] { return values_.count(key) > 0; })) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous key '", key, "' did not appear within ",
                                                      timeout.count(), " ms"));
    }
  }
  std::vector<std::string> out;
  for (const std::string& key : keys) out.push_back(values_.at(key));
  return out;
}

void KvStore::ErasePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.lower_bound(prefix); it != values_.end() && absl::StartsWith(it->first, prefix);) {
    it = values_.erase(it);
  }
}

size_t KvStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.size();
}

}  // namespace lact::server
