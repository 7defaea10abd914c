#include "server/kv_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lact::server {

absl::Status KvStore::Set(const std::string& key, std::string value) {
  if (key.empty() || key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key of ", key.size(),
                                                   " bytes and value of ", value.size(),
                                                   " bytes (allowed: keys of 1..", kMaxKeyBytes,
                                                   " bytes, values up to ", kMaxValueBytes, ")"));
  }
  absl::MutexLock lock(&mu_);  // waiters' conditions are checked as it is released
  if (absl::Status s = CheckAttempt(key); !s.ok()) return s;
  auto it = values_.find(key);
  const size_t replaced = it == values_.end() ? 0 : key.size() + it->second.size();
  if (bytes_ - replaced + key.size() + value.size() > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the rendezvous store holds ", bytes_, " bytes, its limit is ", max_bytes_));
  }
  bytes_ += key.size() + value.size() - replaced;
  values_[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> KvStore::Get(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  for (const std::string& key : keys) {
    const auto present = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return values_.count(key) > 0 || !CheckAttempt(key).ok();
    };
    const bool woken = mu_.AwaitWithDeadline(absl::Condition(&present), deadline);
    if (absl::Status s = CheckAttempt(key); !s.ok()) return s;
    if (!woken) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key '", key, "' did not appear within ", timeout.count(), " ms"));
    }
  }
  std::vector<std::string> out;
  for (const std::string& key : keys) out.push_back(values_.at(key));
  return out;
}

void KvStore::BeginAttempt(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  EraseJobLocked(job_id);
  attempts_[job_id] = absl::StrCat(attempt);
}

void KvStore::EndJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  EraseJobLocked(job_id);
  attempts_.erase(job_id);
}

void KvStore::EraseJobLocked(const std::string& job_id) {
  const std::string prefix = job_id + "/";
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && absl::StartsWith(it->first, prefix);) {
    bytes_ -= it->first.size() + it->second.size();
    it = values_.erase(it);
  }
}

absl::Status KvStore::CheckAttempt(const std::string& key) const {
  const size_t slash = key.find('/');
  const size_t next = slash == std::string::npos ? slash : key.find('/', slash + 1);
  const std::string job = key.substr(0, slash);
  auto it = attempts_.find(job);
  if (next == std::string::npos || it == attempts_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous key '", key.substr(0, 80),
                     "' does not belong to a running job (keys are JOB_ID/ATTEMPT/...)"));
  }
  const std::string attempt = key.substr(slash + 1, next - slash - 1);
  if (attempt != it->second) {
    return absl::FailedPreconditionError(
        absl::StrCat("attempt ", attempt.substr(0, 20), " of job '", job,
                     "' is over; the job runs attempt ", it->second, " now"));
  }
  return absl::OkStatus();
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace lact::server
