#include "worker/data_plane/retained_results.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/retention_text.h"

namespace lact {
namespace {

constexpr size_t kRememberedDrops = 4096;

int64_t ResultBytes(const RetainedResult& result) {
  int64_t bytes = 0;
  if (result.state != nullptr) {
    for (const auto& [name, tensor] : FusedStateTensors(*result.state)) bytes += tensor->size() * 4;
  }
  for (const ResultItem& item : result.outputs) bytes += item.bytes();
  return bytes;
}

}  // namespace

absl::Status RetainedResults::Put(const std::string& job_id, RetainedResult result,
                                  std::chrono::seconds ttl) {
  const int64_t bytes = ResultBytes(result);
  const std::string tenant = result.tenant;
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  if (auto it = jobs_.find(job_id); it != jobs_.end()) DropLocked(it, "replaced", false);
  if (bytes > max_bytes_ || bytes > max_tenant_bytes_) {
    const std::string why =
        bytes > max_bytes_ ? absl::StrCat("not retained: its ", bytes,
                                          " bytes exceed the worker's --retain-bytes ", max_bytes_)
                           : absl::StrCat("not retained: its ", bytes,
                                          " bytes exceed the worker's --retain-bytes-per-tenant ",
                                          max_tenant_bytes_);
    Remember(job_id, why);
    return absl::ResourceExhaustedError(absl::StrCat("job '", job_id, "': ", why));
  }
  std::string why;
  for (auto victim = VictimLocked(tenant, bytes, &why); victim != jobs_.end();
       victim = VictimLocked(tenant, bytes, &why)) {
    DropLocked(victim, why);
  }
  dropped_.erase(job_id);
  Entry& e = jobs_[job_id];
  e.result = std::move(result);
  e.expires = std::chrono::steady_clock::now() + ttl;
  e.bytes = bytes;
  e.order = ++puts_;
  bytes_ += bytes;
  tenant_bytes_[tenant] += bytes;
  return absl::OkStatus();
}

std::map<std::string, RetainedResults::Entry>::iterator RetainedResults::VictimLocked(
    const std::string& tenant, int64_t bytes, std::string* why) {
  std::string from;  // the tenant whose oldest job goes
  const auto held = tenant_bytes_.find(tenant);
  const int64_t tenant_held = held == tenant_bytes_.end() ? 0 : held->second;
  if (max_tenant_bytes_ < max_bytes_ && tenant_held + bytes > max_tenant_bytes_) {
    from = tenant;
    *why = absl::StrCat("evicted: tenant '", tenant,
                        "' reached the worker's --retain-bytes-per-tenant ", max_tenant_bytes_,
                        " (it held ", tenant_held, " bytes and a new job's results took ", bytes,
                        ") and this job's results were its oldest");
  } else if (bytes_ + bytes > max_bytes_) {
    int64_t most = -1;
    for (const auto& [name, held] : tenant_bytes_) {
      const int64_t counted = held + (name == tenant ? bytes : 0);
      if (held > 0 && counted > most) {
        most = counted;
        from = name;
      }
    }
    *why =
        absl::StrCat("evicted: the worker's retained results reached its --retain-bytes ",
                     max_bytes_, " (it held ", bytes_, " bytes and a new job's results took ",
                     bytes, "); tenant '", from, "' held the most and this job's were its oldest");
  } else {
    return jobs_.end();
  }
  auto oldest = jobs_.end();
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (it->second.result.tenant == from &&
        (oldest == jobs_.end() || it->second.order < oldest->second.order)) {
      oldest = it;
    }
  }
  return oldest;
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

void RetainedResults::NotKept(const std::string& job_id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (jobs_.count(job_id) == 0) Remember(job_id, why);
}

std::vector<DroppedJob> RetainedResults::TakeDropped() {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  return std::exchange(to_report_, {});
}

absl::StatusOr<bool> RetainedResults::Forget(const std::string& job_id, const std::string& ticket) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  if (!TicketsEqual(it->second.result.ticket, ticket)) {
    return absl::PermissionDeniedError(absl::StrCat("wrong ticket for job '", job_id, "'"));
  }
  DropLocked(it, "deleted by DeleteJob, or its job did not succeed", false);
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
      "dropped: they reached the job's client, and delivered outputs are kept only briefly";
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto next = std::next(it);
    Entry& e = it->second;
    if (e.expires <= now) {
      DropLocked(it, kRetentionExpired);
    } else if (e.outputs_expire <= now) {
      std::vector<ResultItem> kept;
      for (ResultItem& item : e.result.outputs) {
        if (item.set != 0) {
          kept.push_back(std::move(item));
          continue;
        }
        e.bytes -= item.bytes();
        bytes_ -= item.bytes();
        tenant_bytes_[e.result.tenant] -= item.bytes();
      }
      e.result.outputs = std::move(kept);
      e.result.outputs_dropped = delivered;
      e.outputs_expire = std::chrono::steady_clock::time_point::max();
      if (e.result.state == nullptr && e.result.outputs.empty()) {
        DropLocked(it, delivered);
      } else {
        to_report_.push_back({it->first, false, delivered});
      }
    }
    it = next;
  }
}

void RetainedResults::DropLocked(std::map<std::string, Entry>::iterator it, const std::string& why,
                                 bool report) {
  bytes_ -= it->second.bytes;
  const std::string& tenant = it->second.result.tenant;
  if ((tenant_bytes_[tenant] -= it->second.bytes) <= 0) tenant_bytes_.erase(tenant);
  if (report) to_report_.push_back({it->first, it->second.result.state != nullptr, why});
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
