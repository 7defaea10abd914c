// The life of one job on the coordinator, with no network in it: the
// job's run (job_run.h) reports what happened, and the machine decides
// the job's stage and, when it ends, its outcome. Stages:
//
//   kQueued --Leased--> kStarting --Started--> kRunning --all ranks ended--> kSucceeded
//     |                   |                      |                           kFailed
//     |                   +--StartFailed-------->+-------------------------> kCancelled
//     +--QueueFailed / Cancel--> kFailed / kCancelled
//   kFailed (a worker gone) --Retry--> kQueued
//
// Causes are recorded when they happen, typed, never read back from
// messages: a Cancel (by CancelJob, by the client going away from a job
// bound to its call, by the call's deadline, by DeleteJob) wins over
// everything that follows from it; otherwise a worker whose transport
// broke (it is gone) explains its peers' failures; otherwise a worker that
// stayed silent while its peers' collective gave up (it stalled);
// otherwise the first failure a worker reported; otherwise the first
// failure.
//
// Thread-safe: events may come from any thread (each rank's reader, the
// CancelJob handler, the call watcher). The cancel action is called once,
// outside the lock, when a job that has workers is cancelled.
#ifndef LACT_SERVER_JOB_MACHINE_H_
#define LACT_SERVER_JOB_MACHINE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace lact::server {

enum class JobStage { kQueued, kStarting, kRunning, kSucceeded, kFailed, kCancelled };
const char* JobStageName(JobStage stage);

enum class CancelCause { kCancelJob, kClientGone, kDeadline, kDeleted };

// How one rank's worker stream ended.
struct RankEnd {
  absl::Status status;
  bool from_worker = true;  // false: the transport broke (the worker is gone)
};

class JobMachine {
 public:
  explicit JobMachine(std::string job_id) : job_id_(std::move(job_id)) {}

  // kQueued -> kStarting with one worker per rank. False (nothing changes)
  // if the job was cancelled while it waited: the caller returns the lease.
  bool Leased(std::vector<std::string> workers);
  // kQueued -> kFailed: the queue refused the job or gave up.
  void QueueFailed(absl::Status status);
  // kStarting -> kRunning: every rank's stream is open. False if the job
  // was cancelled meanwhile (the cancel action has run or runs now).
  bool Started();
  // kStarting -> kFailed: rank `rank`'s worker could not be reached (or
  // kCancelled, when a cancel broke the start: no worker is blamed).
  void StartFailed(int rank, absl::Status status);
  // Rank `rank`'s stream ended. True for the first failure of a running
  // job: the caller cancels the peers (they cannot finish without it).
  bool RankEnded(int rank, RankEnd end);
  // A rank reported its group broken and some peers have said nothing
  // since (a grace period): the first rank still running is taken to have
  // stalled, and is blamed as a gone worker would be, unless one is gone.
  void PeersSilent();
  // Asks the job to stop. False if it had already ended (or was already
  // cancelled): the first cause wins. A queued job ends at once; a job with
  // workers ends when its ranks have, and `on_cancel` runs now.
  bool Cancel(CancelCause cause);
  // What Cancel does to a job with workers (cancels its streams). Runs at
  // once if the job is already being cancelled.
  void SetCancelAction(std::function<void()> on_cancel);
  // kFailed -> kQueued, for another attempt on other workers: only a job
  // that failed because a worker is gone or stalled, or whose worker
  // reported its group broken (UNAVAILABLE: a peer is gone), never one
  // cancelled, timed out for want of its client's tokens, or refused by a
  // worker for any other reason. False (nothing changes)
  // otherwise. `*gone` receives the worker known to be gone, or "". The
  // attempt's workers, failures and cancel action are forgotten; a cancel
  // asked for since wins as before.
  bool Retry(std::string* gone);

  JobStage stage() const;
  bool ended() const;
  bool cancel_requested() const;
  // OK for a succeeded job; the failure or cancellation (naming the job,
  // and the worker at fault) for one that did not; UNKNOWN while it runs.
  absl::Status outcome() const;
  // The rank whose worker is gone or stalled (the registry marks it
  // failed), if any.
  std::optional<int> gone_rank() const;

 private:
  void EndIfAllRanksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CancelStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WorkerLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_id_;
  mutable absl::Mutex mu_;
  JobStage stage_ ABSL_GUARDED_BY(mu_) = JobStage::kQueued;
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> rank_ended_ ABSL_GUARDED_BY(mu_);
  std::optional<CancelCause> cancel_ ABSL_GUARDED_BY(mu_);
  // Where a client gone mid-upload was seen: "worker W (rank r): why".
  std::string client_gone_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_cancel_ ABSL_GUARDED_BY(mu_);
  bool cancel_action_ran_ ABSL_GUARDED_BY(mu_) = false;
  // The failures seen, by kind, first of each.
  std::optional<int> gone_ ABSL_GUARDED_BY(mu_);
  absl::Status gone_status_ ABSL_GUARDED_BY(mu_);
  std::optional<int> stalled_ ABSL_GUARDED_BY(mu_);
  std::optional<int> reported_ ABSL_GUARDED_BY(mu_);
  absl::Status reported_status_ ABSL_GUARDED_BY(mu_);
  std::optional<int> other_ ABSL_GUARDED_BY(mu_);
  absl::Status other_status_ ABSL_GUARDED_BY(mu_);
  absl::Status queue_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_MACHINE_H_
