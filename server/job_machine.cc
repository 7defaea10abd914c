#include "server/job_machine.h"

#include "absl/strings/str_cat.h"

namespace lact::server {

const char* JobStageName(JobStage stage) {
  switch (stage) {
    case JobStage::kQueued:
      return "queued";
    case JobStage::kStarting:
      return "starting";
    case JobStage::kRunning:
      return "running";
    case JobStage::kSucceeded:
      return "succeeded";
    case JobStage::kFailed:
      return "failed";
    case JobStage::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

bool JobMachine::Leased(std::vector<std::string> workers) {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kQueued) return false;
  workers_ = std::move(workers);
  rank_ended_.assign(workers_.size(), false);
  stage_ = JobStage::kStarting;
  return true;
}

void JobMachine::QueueFailed(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kQueued) return;
  queue_failure_ = std::move(status);
  stage_ = JobStage::kFailed;
}

bool JobMachine::Retry(std::string* gone) {
  absl::MutexLock lock(&mu_);
  // A timeout alone is no reason: a client that stopped sending its
  // tokens times the upload out too. A collective that timed out for a
  // silent peer has that peer blamed as stalled.
  const bool group_broke = reported_ && reported_status_.code() == absl::StatusCode::kUnavailable;
  if (stage_ != JobStage::kFailed || cancel_.has_value() || !queue_failure_.ok() ||
      !(gone_ || stalled_ || group_broke)) {
    return false;
  }
  *gone = gone_ ? workers_[*gone_] : stalled_ ? workers_[*stalled_] : "";
  stage_ = JobStage::kQueued;
  workers_.clear();
  rank_ended_.clear();
  on_cancel_ = nullptr;
  cancel_action_ran_ = false;
  gone_.reset();
  stalled_.reset();
  reported_.reset();
  other_.reset();
  client_gone_.clear();
  gone_status_ = reported_status_ = other_status_ = absl::OkStatus();
  return true;
}

bool JobMachine::Started() {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kStarting) return false;
  stage_ = JobStage::kRunning;
  return !cancel_.has_value();
}

void JobMachine::StartFailed(int rank, absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kStarting) return;
  if (!gone_ && !cancel_) {  // after a cancel, the cancel broke the start
    gone_ = rank;
    gone_status_ = std::move(status);
  }
  stage_ = cancel_ ? JobStage::kCancelled : JobStage::kFailed;
}

bool JobMachine::RankEnded(int rank, RankEnd end) {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kRunning || rank < 0 || rank >= static_cast<int>(rank_ended_.size()) ||
      rank_ended_[rank]) {
    return false;
  }
  rank_ended_[rank] = true;
  bool first_failure = false;
  if (!end.status.ok()) {
    first_failure = !gone_ && !reported_ && !other_ && !cancel_;
    // A worker ends its shard CANCELLED only when the job was cancelled or
    // when the client's Transfer stream to it went away mid-upload: then
    // the client left, and the job is cancelled as for a client gone.
    if (first_failure && end.from_worker && end.status.code() == absl::StatusCode::kCancelled) {
      cancel_ = CancelCause::kClientGone;
      client_gone_ = absl::StrCat(WorkerLocked(rank), ": ", end.status.message());
    }
    if (!end.from_worker && end.status.code() == absl::StatusCode::kUnavailable) {
      if (!gone_) gone_ = rank, gone_status_ = end.status;
    } else if (end.from_worker) {
      if (!reported_) reported_ = rank, reported_status_ = end.status;
    } else if (!other_) {
      other_ = rank, other_status_ = end.status;
    }
  }
  EndIfAllRanksLocked();
  return first_failure;
}

void JobMachine::EndIfAllRanksLocked() {
  for (bool ended : rank_ended_) {
    if (!ended) return;
  }
  if (cancel_) {
    stage_ = JobStage::kCancelled;
  } else if (gone_ || reported_ || other_) {
    stage_ = JobStage::kFailed;
  } else {
    stage_ = JobStage::kSucceeded;
  }
}

bool JobMachine::Cancel(CancelCause cause) {
  std::function<void()> action;
  {
    absl::MutexLock lock(&mu_);
    if (cancel_ || stage_ == JobStage::kSucceeded || stage_ == JobStage::kFailed ||
        stage_ == JobStage::kCancelled) {
      return false;
    }
    cancel_ = cause;
    if (stage_ == JobStage::kQueued) {
      stage_ = JobStage::kCancelled;
      return true;
    }
    if (on_cancel_ && !cancel_action_ran_) {
      cancel_action_ran_ = true;
      action = on_cancel_;
    }
  }
  if (action) action();
  return true;
}

void JobMachine::SetCancelAction(std::function<void()> on_cancel) {
  bool run_now = false;
  {
    absl::MutexLock lock(&mu_);
    on_cancel_ = on_cancel;
    run_now = cancel_.has_value() && !cancel_action_ran_;
    if (run_now) cancel_action_ran_ = true;
  }
  if (run_now) on_cancel();
}

JobStage JobMachine::stage() const {
  absl::MutexLock lock(&mu_);
  return stage_;
}

bool JobMachine::ended() const {
  const JobStage s = stage();
  return s == JobStage::kSucceeded || s == JobStage::kFailed || s == JobStage::kCancelled;
}

bool JobMachine::cancel_requested() const {
  absl::MutexLock lock(&mu_);
  return cancel_.has_value();
}

std::optional<int> JobMachine::gone_rank() const {
  absl::MutexLock lock(&mu_);
  return gone_ ? gone_ : stalled_;
}

void JobMachine::PeersSilent() {
  absl::MutexLock lock(&mu_);
  if (stage_ != JobStage::kRunning || gone_ || stalled_ || cancel_) return;
  for (int r = 0; r < static_cast<int>(rank_ended_.size()); ++r) {
    if (!rank_ended_[r]) {
      stalled_ = r;
      return;
    }
  }
}

std::string JobMachine::WorkerLocked(int rank) const {
  return absl::StrCat("worker ", rank < static_cast<int>(workers_.size()) ? workers_[rank] : "?",
                      " (rank ", rank, ")");
}

absl::Status JobMachine::CancelStatusLocked() const {
  switch (*cancel_) {
    case CancelCause::kCancelJob:
      return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled by CancelJob"));
    case CancelCause::kClientGone:
      return absl::CancelledError(
          absl::StrCat("job ", job_id_, " cancelled: the client went away",
                       client_gone_.empty() ? "" : absl::StrCat(" (", client_gone_, ")")));
    case CancelCause::kDeadline:
      return absl::DeadlineExceededError(
          absl::StrCat("job ", job_id_, ": the call's deadline expired"));
    case CancelCause::kDeleted:
      return absl::CancelledError(
          absl::StrCat("job ", job_id_, " cancelled: deleted by DeleteJob"));
  }
  return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled"));
}

absl::Status JobMachine::outcome() const {
  absl::MutexLock lock(&mu_);
  switch (stage_) {
    case JobStage::kSucceeded:
      return absl::OkStatus();
    case JobStage::kCancelled:
      return CancelStatusLocked();
    case JobStage::kFailed:
      if (!queue_failure_.ok()) return queue_failure_;
      if (gone_) {
        return absl::UnavailableError(absl::StrCat("job ", job_id_,
                                                   " failed: ", WorkerLocked(*gone_),
                                                   " is gone: ", gone_status_.message()));
      }
      if (stalled_) {
        return absl::UnavailableError(
            absl::StrCat("job ", job_id_, " failed: ", WorkerLocked(*stalled_),
                         " stalled: it said nothing while its peers' collective gave up waiting (",
                         reported_status_.message(), ")"));
      }
      if (reported_) {
        return absl::Status(reported_status_.code(),
                            absl::StrCat("job ", job_id_, " failed: ", WorkerLocked(*reported_),
                                         ": ", reported_status_.message()));
      }
      return absl::Status(other_status_.code(),
                          absl::StrCat("job ", job_id_, " failed: ", WorkerLocked(*other_), ": ",
                                       other_status_.message()));
    default:
      return absl::UnknownError(absl::StrCat("job ", job_id_, " is still ", JobStageName(stage_)));
  }
}

}  // namespace lact::server
