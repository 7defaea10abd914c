#include "server/job_store.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/retention_text.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/auth.h"

namespace lact::server {
namespace {

absl::Status Unknown(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("no job '", id, "' (ListJobs shows the known ones)"));
}

}  // namespace

bool JobStore::Ended(const v1::JobInfo& info) {
  return info.status() != v1::JobInfo::QUEUED && info.status() != v1::JobInfo::RUNNING;
}

absl::StatusOr<std::string> JobStore::Create(const v1::JobSpec& spec) {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
  if (jobs_.size() >= max_records_) {
    // The oldest record of a job that has ended makes room; running and
    // queued jobs are never dropped.
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (Ended(it->second.info) && !it->second.cancel &&
          (oldest == jobs_.end() || it->second.sequence < oldest->second.sequence)) {
        oldest = it;
      }
    }
    if (oldest == jobs_.end()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator holds ", jobs_.size(),
                       " jobs that have not ended, its limit (--max-job-records)"));
    }
    UnpersistLocked(oldest->first);
    jobs_.erase(oldest);
  }
  // 128 random bits: an id cannot be guessed from another.
  const std::string id = absl::StrCat("job-", RandomHex(16));
  Record& r = jobs_[id];
  r.sequence = next_++;
  r.info.set_job_id(id);
  r.info.set_model(spec.model());
  *r.info.mutable_options() = spec.options();
  r.info.set_tenant(spec.tenant());
  r.info.set_status(v1::JobInfo::QUEUED);
  r.info.set_context_tokens(spec.context_tokens());
  r.info.set_submitted_unix_seconds(UnixSeconds(std::chrono::system_clock::now()));
  r.request_id = spec.request_id();
  PersistLocked(r);
  return id;
}

void JobStore::SetCanceller(const std::string& id, std::function<bool(CancelCause)> cancel) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) {
      it->second.cancel = std::move(cancel);
      return;
    }
  }
  cancel(CancelCause::kDeleted);  // deleted before the job could register its canceller
}

void JobStore::Start(const std::string& id, const v1::JobAccepted& accepted,
                     const std::string& ticket) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& r = it->second;
  r.ticket = ticket;
  if (r.info.status() == v1::JobInfo::QUEUED) r.info.set_status(v1::JobInfo::RUNNING);
  r.info.set_context_tokens(accepted.context_tokens());
  r.info.set_workers(accepted.shards_size());
  *r.info.mutable_accepted() = accepted;
  r.info.set_started_unix_seconds(UnixSeconds(std::chrono::system_clock::now()));
  ChangedLocked(r);
  PersistLocked(r);
}

std::optional<std::string> JobStore::FindRequest(const std::string& tenant,
                                                 const std::string& request_id) const {
  if (request_id.empty()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, r] : jobs_) {
    if (r.request_id == request_id && r.info.tenant() == tenant) return id;
  }
  return std::nullopt;
}

void JobStore::SetRecord(const std::string& id, const JobRecord& record) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || Ended(it->second.info)) return;
  it->second.run = record.SerializeAsString();
  PersistLocked(it->second);
}

void JobStore::Finish(const std::string& id, v1::JobInfo::Status status, const std::string& error,
                      const v1::JobStats& stats) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& r = it->second;
  r.adopting = -1;
  if (!Ended(r.info)) r.info.set_status(status);
  if (r.info.error().empty()) r.info.set_error(error);
  *r.info.mutable_stats() = stats;
  r.info.clear_progress();
  r.info.set_finished_unix_seconds(UnixSeconds(std::chrono::system_clock::now()));
  r.cancel = nullptr;
  r.forget_after = std::max(r.forget_after, std::chrono::system_clock::now() + record_ttl_);
  ChangedLocked(r);
  PersistLocked(r);
}

void JobStore::Retain(const std::string& id, std::shared_ptr<const RetainedState> state,
                      bool results, bool outputs, std::chrono::seconds ttl) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.state = std::move(state);
  it->second.expires = std::chrono::system_clock::now() + ttl;
  it->second.forget_after = std::max(it->second.forget_after, it->second.expires);
  it->second.info.set_state_retained(true);
  it->second.info.set_results_retained(results);
  it->second.info.set_outputs_retained(outputs);
  it->second.info.clear_results_dropped();
  it->second.info.set_expires_unix_seconds(
      std::chrono::duration_cast<std::chrono::seconds>(it->second.expires.time_since_epoch())
          .count());
  ChangedLocked(it->second);
  PersistLocked(it->second);
}

void JobStore::ResultsDropped(const std::string& id, bool state, const std::string& why) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.info.status() != v1::JobInfo::SUCCEEDED) return;
  Record& r = it->second;
  // Any drop takes the context's outputs (a rank's, or all with the state);
  // the query outputs and state go only with the state.
  r.info.set_outputs_retained(false);
  if (state || r.info.results_dropped().empty()) r.info.set_results_dropped(why);
  if (state) {
    r.state.reset();
    r.info.set_state_retained(false);
    r.info.set_results_retained(false);
  }
  ChangedLocked(r);
  PersistLocked(r);
}

void JobStore::ChangedLocked(Record& r) {
  ++r.version;  // a waiter's condition is checked as the lock is released
}

void JobStore::SetProgress(const std::string& id, const v1::Progress& progress) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  *it->second.info.mutable_progress() = progress;
  ChangedLocked(it->second);
}

void JobStore::SetSpooled(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.info.mutable_stats()->set_spooled(true);
  ChangedLocked(it->second);
  PersistLocked(it->second);
}

absl::StatusOr<v1::JobInfo> JobStore::WaitForChange(const std::string& id, uint64_t* seen,
                                                    std::chrono::milliseconds wait,
                                                    const std::atomic<bool>* stop,
                                                    bool with_ticket) {
  absl::MutexLock lock(&mu_);
  const auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stop != nullptr && stop->load()) return true;
    auto it = jobs_.find(id);
    return it == jobs_.end() || it->second.version != *seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), absl::FromChrono(wait));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Unknown(id);
  *seen = it->second.version;
  v1::JobInfo info = it->second.info;
  if (with_ticket && !it->second.ticket.empty())
    info.mutable_accepted()->set_ticket(it->second.ticket);
  return info;
}

absl::StatusOr<v1::JobInfo> JobStore::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Unknown(id);
  return it->second.info;
}

std::vector<v1::JobInfo> JobStore::List(const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  std::vector<const Record*> owned;
  for (const auto& [id, r] : jobs_) {
    if (caller.Owns(r.info.tenant())) owned.push_back(&r);
  }
  std::sort(owned.begin(), owned.end(),
            [](const Record* a, const Record* b) { return a->sequence < b->sequence; });
  std::vector<v1::JobInfo> out;
  for (const Record* r : owned) out.push_back(r->info);
  return out;
}

JobStore::Counts JobStore::Count() const {
  absl::MutexLock lock(&mu_);
  Counts counts;
  for (const auto& [id, r] : jobs_) {
    ++counts.by_status[r.info.status()];
    counts.retained_states += r.info.state_retained() ? 1 : 0;
  }
  return counts;
}

absl::Status JobStore::CheckOwner(const std::string& id, const Caller& caller) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !caller.Owns(it->second.info.tenant())) return Unknown(id);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobInfo> JobStore::Cancel(const std::string& id) {
  std::function<bool(CancelCause)> cancel;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Unknown(id);
    if (!Ended(it->second.info)) cancel = it->second.cancel;
  }
  // The job decides: it may have ended since.
  if (!cancel || !cancel(CancelCause::kCancelJob)) {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Unknown(id);
    return absl::FailedPreconditionError(
        absl::StrCat("job '", id, "' has ended or is being cancelled (status ",
                     v1::JobInfo::Status_Name(it->second.info.status()), ")"));
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Unknown(id);
  Record& r = it->second;
  if (!Ended(r.info)) {
    r.info.set_status(v1::JobInfo::CANCELLED);
    r.info.set_error(absl::StrCat("job ", id, " cancelled by CancelJob"));
    ChangedLocked(r);
    PersistLocked(r);
  }
  return r.info;
}

absl::StatusOr<v1::JobInfo> JobStore::Delete(const std::string& id) {
  std::function<bool(CancelCause)> cancel;
  v1::JobInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Unknown(id);
    if (!Ended(it->second.info)) cancel = std::move(it->second.cancel);
    info = std::move(it->second.info);
    UnpersistLocked(id);
    jobs_.erase(it);
  }
  if (cancel) cancel(CancelCause::kDeleted);
  return info;
}

absl::StatusOr<std::shared_ptr<const RetainedState>> JobStore::State(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Unknown(id);
  const Record& r = it->second;
  if (!r.state || std::chrono::system_clock::now() >= r.expires) {
    const std::string why = r.state ? kRetentionExpired : r.info.results_dropped();
    return absl::FailedPreconditionError(
        absl::StrCat("job '", id, "' has no retained state (status ",
                     v1::JobInfo::Status_Name(r.info.status()), why.empty() ? "" : "; ", why, ")"));
  }
  return r.state;
}

bool JobStore::AwaitNoLiveJobs(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  const auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, r] : jobs_) {
      if (!Ended(r.info) || r.cancel) return false;
    }
    return true;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

void JobStore::Expire() {
  absl::MutexLock lock(&mu_);
  ExpireLocked();
}

void JobStore::ExpireLocked() {
  const auto now = std::chrono::system_clock::now();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Record& r = it->second;
    if (r.state && now >= r.expires) {
      r.state.reset();
      r.info.set_state_retained(false);
      r.info.set_results_retained(false);
      r.info.set_outputs_retained(false);
      r.info.set_results_dropped(kRetentionExpired);
      PersistLocked(r);
    }
    const bool finished = Ended(r.info) && !r.cancel;
    if (finished && r.forget_after.time_since_epoch().count() != 0 && now >= r.forget_after &&
        !r.state) {
      UnpersistLocked(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {

int64_t Micros(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::chrono::system_clock::time_point FromMicros(int64_t us) {
  return std::chrono::system_clock::time_point(std::chrono::microseconds(us));
}

}  // namespace

void JobStore::PersistLocked(const Record& r) {
  if (journal_ == nullptr) return;
  JournalRecord j{r.info.job_id(),        r.sequence, r.info, "", "", Micros(r.expires),
                  Micros(r.forget_after), r.run};
  if (r.state) {
    j.model = r.state->model;
    j.worker = r.state->worker;
  }
  if (absl::Status s = journal_->Put(j); !s.ok()) {
    Log(LogLevel::kError, "journal_write_failed",
        {{"job", r.info.job_id()}, {"error", s.message()}});
  }
}

void JobStore::UnpersistLocked(const std::string& id) {
  if (journal_ == nullptr) return;
  if (absl::Status s = journal_->Erase(id); !s.ok()) {
    Log(LogLevel::kError, "journal_erase_failed", {{"job", id}, {"error", s.message()}});
  }
}

absl::Status JobStore::Restore(JobJournal* journal) {
  LACT_ASSIGN_OR_RETURN(std::vector<JournalRecord> records, journal->LoadAll());
  absl::MutexLock lock(&mu_);
  journal_ = journal;
  const auto now = std::chrono::system_clock::now();
  for (JournalRecord& j : records) {
    Record& r = jobs_[j.id];
    r.info = std::move(j.info);
    r.sequence = j.sequence;
    r.expires = FromMicros(j.expires_us);
    r.forget_after = FromMicros(j.forget_after_us);
    next_ = std::max(next_, j.sequence + 1);
    JobRecord record;
    const bool recorded = !j.run.empty() && record.ParseFromString(j.run);
    r.run = std::move(j.run);
    if (recorded) r.request_id = record.spec().request_id();
    if (!Ended(r.info) && recorded) {
      // Taken back: its shards run on on their workers meanwhile.
      r.adopting = r.info.status() == v1::JobInfo::RUNNING ? record.attempt() : -1;
      restored_.push_back({r.info, std::move(record)});
    } else if (!Ended(r.info)) {
      // Nothing to take it back with (a journal written before jobs
      // outlived the coordinator).
      const std::string was = v1::JobInfo::Status_Name(r.info.status());
      r.info.set_status(v1::JobInfo::FAILED);
      r.info.set_error(
          absl::StrCat("job ", j.id, " was ", was, " when the coordinator stopped; run it again"));
      r.info.clear_progress();
      r.info.set_finished_unix_seconds(UnixSeconds(now));
      r.forget_after = now + record_ttl_;
    }
    if (!j.model.empty() && now < r.expires) {
      r.state = std::make_shared<RetainedState>(RetainedState{j.model, j.worker});
    } else {
      if (!j.model.empty()) r.info.set_results_dropped(kRetentionExpired);
      r.info.set_state_retained(false);
      r.info.set_results_retained(false);
      r.info.set_outputs_retained(false);
    }
    PersistLocked(r);
  }
  ExpireLocked();
  return absl::OkStatus();
}

std::vector<RestoredJob> JobStore::TakeRestored() {
  absl::MutexLock lock(&mu_);
  return std::move(restored_);
}

bool JobStore::WantsHeldShard(const std::string& id, int attempt) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  return it != jobs_.end() && !Ended(it->second.info) && it->second.adopting >= 0 &&
         it->second.adopting == attempt;
}

void JobStore::Adopted(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (auto it = jobs_.find(id); it != jobs_.end()) it->second.adopting = -1;
}

void JobStore::HandOver() {
  absl::MutexLock lock(&mu_);
  journal_ = nullptr;
}

}  // namespace lact::server
