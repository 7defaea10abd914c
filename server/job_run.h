// One admitted job's run on the coordinator, with no network of its own:
// it leases workers, starts each attempt's shards over a JobTransport,
// relays their progress to the JobCall, runs the job again on other
// workers when one is gone or stalled (up to CoordinatorOptions::max_reruns
// times, while its context and query sets can be had again), and records
// the outcome its JobMachine decided, with the job's statistics. The
// Submit flow (submit_flow.cc) admits the job and adapts the gRPC call;
// unit tests drive a run with their own transport (job_run_test.cc).
//
// Re-runs: an attempt that failed because a worker is gone runs again when
// its context can be read again (a file by reference, or a spool every
// rank filled) or sent again by its client, and its query sets, if any,
// sent again: by their client, if it is still there.
//
// Restarts: the run keeps its JobRecord in the job's record (the journal,
// with --state-dir) at admission and at every attempt, so that a
// coordinator started again takes the job back (TakeBack): the attempt
// that ran follows its shards again where they run (AttachShard), or, when
// it cannot, runs again as above; a queued job queues again.
#ifndef LACT_SERVER_JOB_RUN_H_
#define LACT_SERVER_JOB_RUN_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/data_files.h"
#include "common/timing.h"
#include "lact/v1/coordinator.pb.h"
#include "server/attempt_readers.h"
#include "server/job_admission.h"
#include "server/job_files.h"
#include "server/job_flows.h"
#include "server/job_machine.h"
#include "server/job_messages.h"
#include "server/job_record.pb.h"
#include "server/job_transport.h"

namespace lact::server {

// An admitted job: its record exists (JobStore::Create) under `id`.
struct AdmittedJob {
  std::string id;
  v1::JobSpec spec;  // files resolved, the tenant set
  JobFiles files;
  JobPlan plan;
};

// How CancelJob and DeleteJob reach the job's machine (JobStore::SetCanceller);
// a cancel wakes the queue, which looks at it only then.
void SetJobCanceller(const CoordinatorContext& c, const std::string& id,
                     std::shared_ptr<JobMachine> machine);

class JobRun {
 public:
  JobRun(const CoordinatorContext& c, JobTransport* transport, JobCall* call, AdmittedJob job,
         std::shared_ptr<JobMachine> machine)
      : ctx_(c),
        transport_(transport),
        call_(call),
        job_(std::move(job)),
        machine_(std::move(machine)) {}

  // Runs every attempt and records the end: OK once the job succeeded and
  // its done message went to the call; else the failure, the job's record
  // finished with it and what it left behind cleaned up.
  absl::Status Run();
  // Before Run, for a job the last coordinator admitted: where it stood
  // (its JobRecord). Its first attempt is the record's, followed again on
  // its workers, if one was running.
  void TakeBack(const JobRecord& record);
  // The call ended before the job did: its deadline bounds the job; the
  // client going away ends it only if the job is bound to its call.
  // Callable from any thread.
  void OnCallEnded();

  const v1::JobStats& stats() const { return stats_; }

 private:
  absl::Status RunAttempts();
  // Before another attempt; false when the job cannot run again.
  bool PrepareRerun(const absl::Status& failed);
  absl::Status Execute();
  // The leased attempt: streams opened, accepted, every rank read.
  absl::Status RunLeased(const std::vector<std::string>& workers);
  // The taken-back attempt: its shards followed again on `workers`.
  absl::Status Resume(const std::vector<std::string>& workers);
  // Every rank read to its end, the attempt's statistics added.
  absl::Status ReadAttempt(AttemptStreams* streams);
  // The job's JobRecord as it stands, to its record.
  void Record() const;
  // What the attempt's readers report: progress, spooling, a rank's failure.
  AttemptEvents Events();
  void FinishFailed(const absl::Status& status);
  void FinishSucceeded();

  bool BoundToCall() const;
  void CheckCall();
  bool CanRerun() const;
  bool AllRanksSpooled() const;
  void CreateSpool();
  void ForgetEarlierAttempt(const std::string& gone);
  AttemptFacts Facts(const std::string& ticket) const;
  std::chrono::seconds RetainFor() const;
  void WriteProgress(v1::Progress progress);
  void ReportEnd(v1::JobInfo::Status status, absl::string_view error = "") const;

  const CoordinatorContext& ctx_;
  JobTransport* const transport_;
  JobCall* const call_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double admitted_unix_seconds_ = UnixSeconds();
  AdmittedJob job_;
  std::shared_ptr<JobMachine> machine_;
  std::vector<std::string> lease_addresses_;
  std::string fetch_ticket_;
  std::optional<ReadyFile> output_;  // the output file, once made
  std::atomic<bool> accepted_sent_{false};
  std::string spool_path_;  // the in-band context's spool file, if it has one
  bool context_from_spool_ = false;
  bool queue_failed_ = false;  // the last attempt got no workers
  std::atomic<bool> attempt_spooled_{false};
  int running_attempt_ = -1;         // the attempt with workers, while it has them
  std::vector<std::string> resume_;  // a taken-back attempt's workers, by rank
  bool taken_back_ = false;
  v1::JobStats stats_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_RUN_H_
