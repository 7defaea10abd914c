#include "worker/retained_results.h"

#include "absl/strings/str_cat.h"

namespace lact {
namespace {

constexpr size_t kRememberedDrops = 4096;

int64_t ResultBytes(const RetainedResult& result) {
  int64_t bytes = 0;
  if (result.state != nullptr) {
    for (const auto& [name, tensor] : FusedStateTensors(*result.state)) bytes += tensor->size() * 4;
  }
  for (const ResultItem& item : result.outputs) bytes += item.tensor->size() * 4;
  return bytes;
}

}  // namespace

absl::Status RetainedResults::Put(const std::string& job_id, RetainedResult result,
                                  std::chrono::seconds ttl) {
  const int64_t bytes = ResultBytes(result);
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  if (auto it = jobs_.find(job_id); it != jobs_.end()) DropLocked(it, "replaced");
  if (bytes > max_bytes_) {
    const std::string why = absl::StrCat("not retained: its ", bytes,
                                         " bytes exceed the worker's --retain-bytes ", max_bytes_);
    Remember(job_id, why);
    return absl::ResourceExhaustedError(absl::StrCat("job '", job_id, "': ", why));
  }
  while (!jobs_.empty() && bytes_ + bytes > max_bytes_) {
    auto oldest = jobs_.begin();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->second.order < oldest->second.order) oldest = it;
    }
    DropLocked(oldest,
               absl::StrCat("evicted: the worker's retained results reached its --retain-bytes ",
                            max_bytes_, " and this job's were the oldest"));
  }
  dropped_.erase(job_id);
  Entry& e = jobs_[job_id];
  e.result = std::move(result);
  e.expires = std::chrono::steady_clock::now() + ttl;
  e.bytes = bytes;
  e.order = ++puts_;
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<RetainedResult> RetainedResults::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second.result;
  auto dropped = dropped_.find(job_id);
  return absl::NotFoundError(absl::StrCat("this worker holds no results of job '", job_id, "'",
                                          dropped != dropped_.end()
                                              ? absl::StrCat(" (", dropped->second, ")")
                                              : std::string(" (never computed here)")));
}

void RetainedResults::Delivered(const std::string& job_id, std::chrono::seconds grace) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.result.outputs.empty()) return;
  it->second.outputs_expire = std::chrono::steady_clock::now() + grace;
}

absl::StatusOr<bool> RetainedResults::Forget(const std::string& job_id, const std::string& ticket) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  if (!TicketsEqual(it->second.result.ticket, ticket)) {
    return absl::PermissionDeniedError(absl::StrCat("wrong ticket for job '", job_id, "'"));
  }
  DropLocked(it, "deleted by DeleteJob, or its job did not succeed");
  return true;
}

int64_t RetainedResults::bytes() {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  return bytes_;
}

void RetainedResults::ExpireLocked() {
  const auto now = std::chrono::steady_clock::now();
  const char* delivered =
      "dropped: they reached the job's client, and delivered results are kept only briefly";
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto next = std::next(it);
    Entry& e = it->second;
    if (e.expires <= now) {
      DropLocked(it, "expired: its retention time passed");
    } else if (e.outputs_expire <= now && e.result.state == nullptr) {
      DropLocked(it, delivered);
    } else if (e.outputs_expire <= now) {
      for (const ResultItem& item : e.result.outputs) {
        e.bytes -= item.tensor->size() * 4;
        bytes_ -= item.tensor->size() * 4;
      }
      e.result.outputs.clear();
      e.result.outputs_dropped = delivered;
      e.outputs_expire = std::chrono::steady_clock::time_point::max();
    }
    it = next;
  }
}

void RetainedResults::DropLocked(std::map<std::string, Entry>::iterator it,
                                 const std::string& why) {
  bytes_ -= it->second.bytes;
  Remember(it->first, why);
  jobs_.erase(it);
}

void RetainedResults::Remember(const std::string& job_id, const std::string& why) {
  if (dropped_.insert_or_assign(job_id, why).second) dropped_order_.push_back(job_id);
  if (dropped_order_.size() > kRememberedDrops) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
}

}  // namespace lact
