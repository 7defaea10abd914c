// Jobs the coordinator has admitted: their status (QUEUED, RUNNING, then
// how they ended), where their shards run, statistics, a way to cancel the
// ones that have not ended, and where the retained fused state of finished
// ones is (dropped after its TTL, or by Delete). A finished job's record is
// kept for `record_ttl` after it ended (or until its state expires, if
// later), so the store does not grow without bound. Job ids carry 128
// random bits; a job belongs to its JobSpec's tenant. Thread-safe.
#ifndef LACT_SERVER_JOB_STORE_H_
#define LACT_SERVER_JOB_STORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lact/v1/coordinator.pb.h"
#include "server/job_journal.h"
#include "server/job_machine.h"
#include "server/job_record.pb.h"
#include "server/tenant_tokens.h"

namespace lact::server {

// What a later Query needs: the model, and the worker that keeps the
// job's fused state (rank 0; the state itself never comes here).
struct RetainedState {
  std::string model;
  std::string worker;  // address
};

// A job that was queued or running when the last coordinator stopped, as
// its journal holds it: the job's run takes it back (job_recovery.h).
struct RestoredJob {
  v1::JobInfo info;
  JobRecord record;
};

class JobStore {
 public:
  explicit JobStore(std::chrono::seconds record_ttl = std::chrono::hours(1),
                    size_t max_records = 100000)
      : record_ttl_(record_ttl), max_records_(max_records) {}

  // A new QUEUED job; returns its id. At `max_records` records the oldest
  // of a job that has ended is dropped to make room; RESOURCE_EXHAUSTED
  // (naming --max-job-records) when every record is of a live job.
  absl::StatusOr<std::string> Create(const v1::JobSpec& spec);
  // How Cancel (CancelJob) and Delete stop the job: false if it had already
  // ended. Called at once if the job was deleted before this call.
  void SetCanceller(const std::string& id, std::function<bool(CancelCause)> cancel);
  // The job has workers: RUNNING, and where its shards run; `ticket`, the
  // attempt's Transfer ticket, for a Submit call that follows the job
  // (WaitForChange's with_ticket).
  void Start(const std::string& id, const v1::JobAccepted& accepted,
             const std::string& ticket = "");
  // The job `tenant` submitted with `request_id` (JobSpec.request_id), if
  // its record is still kept.
  std::optional<std::string> FindRequest(const std::string& tenant,
                                         const std::string& request_id) const;
  // What a restarted coordinator needs to take the running job back
  // (kept in the journal until the job ends).
  void SetRecord(const std::string& id, const JobRecord& record);
  void Finish(const std::string& id, v1::JobInfo::Status status, const std::string& error,
              const v1::JobStats& stats);
  // The finished job's fused state is kept (and, if `results`, its in-band
  // results; if `outputs`, its context's outputs among them) on its workers
  // until `ttl` from now.
  void Retain(const std::string& id, std::shared_ptr<const RetainedState> state, bool results,
              bool outputs, std::chrono::seconds ttl);
  // A worker dropped what it kept of a finished job (evicted, expired, its
  // outputs' grace over): its context's outputs are no longer whole, nor
  // its state and the rest of its results when `state`. `why`, the
  // worker's words, becomes JobInfo.results_dropped (a drop of the state
  // replaces an earlier reason; otherwise the first reason stays).
  void ResultsDropped(const std::string& id, bool state, const std::string& why);
  void SetProgress(const std::string& id, const v1::Progress& progress);
  // Every rank's in-band context rows are in the coordinator's spool: a
  // running job's JobInfo.stats.spooled turns true (it can run again).
  void SetSpooled(const std::string& id);

  absl::StatusOr<v1::JobInfo> Get(const std::string& id) const;
  // The job's info once it changed after version `*seen` (0: at once),
  // waiting up to `wait`, or until *stop is set and Wake() called; *seen
  // becomes the version returned. NOT_FOUND if the job is unknown or was
  // deleted.
  // `with_ticket`: JobInfo.accepted carries the Transfer ticket given to
  // Start.
  absl::StatusOr<v1::JobInfo> WaitForChange(const std::string& id, uint64_t* seen,
                                            std::chrono::milliseconds wait,
                                            const std::atomic<bool>* stop = nullptr,
                                            bool with_ticket = false);
  // Makes every WaitForChange look at its stop flag.
  void Wake() { absl::MutexLock lock(&mu_); }
  // The jobs `caller` owns, oldest first.
  std::vector<v1::JobInfo> List(const Caller& caller = Caller{"", true}) const;
  // Every tenant's jobs by status, and how many keep a fused state (what a
  // metrics scrape reads; no record is copied).
  struct Counts {
    std::map<v1::JobInfo::Status, int> by_status;
    int retained_states = 0;
  };
  Counts Count() const;
  // NOT_FOUND, the same as for an unknown job, unless `caller` owns job `id`.
  absl::Status CheckOwner(const std::string& id, const Caller& caller) const;
  // NOT_FOUND, or FAILED_PRECONDITION if the job has ended.
  absl::StatusOr<v1::JobInfo> Cancel(const std::string& id);
  // Forgets the job (cancelling it if it has not ended); returns its last
  // JobInfo (where its shards ran, as it stood when deleted).
  absl::StatusOr<v1::JobInfo> Delete(const std::string& id);
  // NOT_FOUND if unknown, FAILED_PRECONDITION if not retained (running,
  // failed, expired, dropped: the message gives results_dropped).
  absl::StatusOr<std::shared_ptr<const RetainedState>> State(const std::string& id) const;
  // Drops retained states whose TTL has passed, and finished records past
  // theirs.
  void Expire();
  // Waits until no job is queued or running, or `deadline`; false at the
  // deadline.
  bool AwaitNoLiveJobs(absl::Time deadline) const;

  // Keeps every record in `journal` (which must outlive the store) from now
  // on, after taking in the ones it holds: a job that was queued or running
  // when the last coordinator stopped stays so, to be taken back
  // (TakeRestored), unless its record lacks what that needs (then it ends
  // FAILED, saying so); a retained state whose TTL has not passed is
  // retained again. Call before any other method. A failed write later is
  // logged; the job goes on.
  absl::Status Restore(JobJournal* journal);
  // The jobs Restore kept live, oldest first (once).
  std::vector<RestoredJob> TakeRestored();
  // Whether a worker's held shard (job_id, attempt) is one a restored job
  // will follow again: the job lives, runs that attempt, and has not yet
  // followed its shards (Adopted).
  bool WantsHeldShard(const std::string& id, int attempt) const;
  // The restored job follows its shards again (or gave them up): held
  // shards of it are let go from now on.
  void Adopted(const std::string& id);
  // The coordinator hands its live jobs over to the next one (a rollout):
  // their records are written no more, so they stay live in the journal
  // whatever this process does to them as it stops.
  void HandOver();

 private:
  struct Record {
    v1::JobInfo info;
    std::function<bool(CancelCause)> cancel;
    std::shared_ptr<const RetainedState> state;
    std::chrono::system_clock::time_point expires;       // of the retained state
    std::chrono::system_clock::time_point forget_after;  // of the record, once finished
    uint64_t version = 1;                                // bumped at every change
    uint64_t sequence = 0;                               // order of creation
    std::string run;                                     // the serialized JobRecord
    std::string request_id;                              // JobSpec.request_id
    std::string ticket;  // the running attempt's Transfer ticket, for WatchJob
    int adopting = -1;   // a restored job's attempt whose held shards it will follow
  };
  void ChangedLocked(Record& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the record to the journal (if any), or erases it there.
  void PersistLocked(const Record& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpersistLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool Ended(const v1::JobInfo& info);
  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::chrono::seconds record_ttl_;
  const size_t max_records_;
  mutable absl::Mutex mu_;
  std::map<std::string, Record> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  JobJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<RestoredJob> restored_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_STORE_H_
