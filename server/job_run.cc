#include "server/job_run.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/in_band.h"
#include "proto/job_options.h"
#include "server/attempt_readers.h"

namespace lact::server {
namespace {

// How long a failed shard of a job bound to its call waits for the call's
// end to be heard of, when its worker says the client went away.
constexpr absl::Duration kClientGoneGrace = absl::Seconds(2);

// Returns leased workers to the registry at scope exit.
class WorkerLease {
 public:
  WorkerLease(WorkerRegistry* registry, std::vector<std::string> addresses, std::string job)
      : registry_(registry), addresses_(std::move(addresses)), job_(std::move(job)) {}
  ~WorkerLease() { registry_->Release(addresses_, job_); }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  WorkerRegistry* registry_;
  std::vector<std::string> addresses_;
  std::string job_;
};

v1::JobInfo::Status InfoStatus(JobStage stage) {
  switch (stage) {
    case JobStage::kSucceeded:
      return v1::JobInfo::SUCCEEDED;
    case JobStage::kCancelled:
      return v1::JobInfo::CANCELLED;
    default:
      return v1::JobInfo::FAILED;
  }
}

v1::Progress QueuedProgress(int position) {
  v1::Progress p;
  p.set_stage(v1::Progress::QUEUED);
  p.set_queue_position(position);
  return p;
}

}  // namespace

void SetJobCanceller(const CoordinatorContext& c, const std::string& id,
                     std::shared_ptr<JobMachine> machine) {
  c.jobs->SetCanceller(id, [machine, registry = c.registry](CancelCause cause) {
    const bool cancelled = machine->Cancel(cause);
    registry->WakeWaiters();
    return cancelled;
  });
}

absl::Status JobRun::Run() {
  Record();
  const absl::Status status = RunAttempts();
  if (std::optional<int> gone = machine_->gone_rank();
      gone && lease_addresses_.size() > static_cast<size_t>(*gone)) {
    ctx_.registry->MarkFailed(lease_addresses_[*gone]);
  }
  stats_.set_seconds(SecondsSince(start_));
  stats_.set_coordinator_peak_rss_bytes(PeakRssBytes());
  if (status.ok()) {
    FinishSucceeded();
  } else {
    FinishFailed(status);
  }
  // Once the end is recorded: a coordinator that stops before then takes
  // the job back, and may need its spool to run it again.
  if (!spool_path_.empty()) ctx_.spool->Remove(job_.id);
  ctx_.kv->EndJob(job_.id);
  return status;
}

absl::Status JobRun::RunAttempts() {
  absl::Status status = Execute();
  stats_.set_spooled(AllRanksSpooled());
  while (!status.ok() && PrepareRerun(status)) {
    const absl::Status failed = std::move(status);
    status = Execute();
    // No workers to run it again: what the client needs to hear is why
    // the attempt before failed.
    if (queue_failed_) {
      status = absl::Status(
          failed.code(),
          absl::StrCat(failed.message(), "; it could not run again: ", status.message()));
    }
  }
  return status;
}

bool JobRun::PrepareRerun(const absl::Status& failed) {
  if (!CanRerun() || stats_.reruns() >= ctx_.options.max_reruns) return false;
  std::string gone;
  if (!machine_->Retry(&gone)) return false;
  // Before the next lease, so it is not chosen again.
  if (!gone.empty()) ctx_.registry->MarkFailed(gone);
  ForgetEarlierAttempt(gone);
  running_attempt_ = -1;
  ctx_.jobs->Adopted(job_.id);  // the attempt's shards still held are let go
  if (AllRanksSpooled()) {
    // From now on the job reads its context by reference, from its spool.
    job_.spec.mutable_context_ref()->set_path(spool_path_);
    context_from_spool_ = true;
  }
  stats_.set_reruns(stats_.reruns() + 1);
  Record();
  Log(LogLevel::kWarn, "job_rerun",
      {{"job", job_.id},
       {"cause", failed.message()},
       {"rerun", stats_.reruns()},
       {"gone_worker", gone},
       {"context_from_spool", context_from_spool_}});
  return true;
}

absl::Status JobRun::Execute() {
  if (!resume_.empty()) {
    const std::vector<std::string> workers = std::move(resume_);
    resume_.clear();
    return Resume(workers);
  }
  const auto until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(
      call_->capped_deadline() - std::chrono::system_clock::now());
  WorkerRegistry::Wait wait{
      std::max(std::chrono::milliseconds(0), std::min(ctx_.options.acquire_wait, until_deadline)),
      ctx_.options.max_queued_jobs,
      [this] {
        CheckCall();
        return machine_->cancel_requested();
      },
      [this](int position) { WriteProgress(QueuedProgress(position)); },
      job_.spec.tenant(),
      job_.id};
  absl::StatusOr<std::vector<std::string>> leased =
      ctx_.registry->Acquire(job_.spec.model(), job_.plan.workers, wait);
  if (!leased.ok()) {
    CheckCall();  // a wait cut short by the deadline
    queue_failed_ = true;
    machine_->QueueFailed(leased.status());
    return machine_->outcome();
  }
  WorkerLease lease(ctx_.registry, *leased, job_.id);
  if (!machine_->Leased(lease.addresses())) return machine_->outcome();
  lease_addresses_ = lease.addresses();
  return RunLeased(lease.addresses());
}

absl::Status JobRun::RunLeased(const std::vector<std::string>& workers) {
  // The dead attempt's shards, if any, stop meeting here now.
  ctx_.kv->BeginAttempt(job_.id, stats_.reruns());
  const std::string ticket = NewTicket();
  fetch_ticket_ = NewTicket();
  CreateSpool();
  attempt_spooled_ = false;
  // Once: a re-run writes the rows of the file the first attempt made.
  if (!job_.files.output.empty() && !output_) {
    LACT_ASSIGN_OR_RETURN(
        output_, CreateOutputFile(job_.files.output, job_.spec.context_tokens(),
                                  job_.plan.config.output_width(), job_.spec.output_ref().replace(),
                                  job_.spec.has_context_ref() ? &job_.files.context_id : nullptr));
  }
  running_attempt_ = stats_.reruns();
  Record();
  std::shared_ptr<AttemptStreams> streams = transport_->Streams(workers);
  machine_->SetCancelAction([streams] { streams->Cancel(); });
  const AttemptFacts facts = Facts(ticket);
  const v1::SubmitResponse accepted = Accepted(facts, workers);
  v1::JobAccepted shown = accepted.accepted();
  shown.clear_ticket();  // the Transfer ticket is the job's Submit calls' alone
  // A Submit call made again (its client lost the first, or a job taken
  // back) hears of the attempt from the job's record.
  ctx_.jobs->Start(job_.id, shown, ticket);
  Log(LogLevel::kInfo, "job_started", {{"job", job_.id}, {"workers", workers}});
  if (absl::Status opened = streams->Open(ShardSpecs(facts), call_->capped_deadline());
      !opened.ok()) {
    CheckCall();  // an expired deadline is not the worker's fault
    machine_->StartFailed(streams->broken_rank(), opened);
    streams->Cancel();
    return machine_->outcome();
  }
  if (machine_->Started()) accepted_sent_ = call_->Write(accepted) || taken_back_;
  if (!accepted_sent_) OnCallEnded();
  return ReadAttempt(streams.get());
}

absl::Status JobRun::Resume(const std::vector<std::string>& workers) {
  ctx_.registry->Claim(workers, job_.id);
  WorkerLease lease(ctx_.registry, workers, job_.id);
  if (!machine_->Leased(workers)) {
    ctx_.jobs->Adopted(job_.id);
    return machine_->outcome();
  }
  lease_addresses_ = workers;
  running_attempt_ = stats_.reruns();
  std::shared_ptr<AttemptStreams> streams = transport_->Follow(workers, job_.id, running_attempt_);
  machine_->SetCancelAction([streams] { streams->Cancel(); });
  Log(LogLevel::kInfo, "job_taken_back",
      {{"job", job_.id}, {"attempt", running_attempt_}, {"workers", workers}});
  if (absl::Status opened = streams->Open({}, call_->capped_deadline()); !opened.ok()) {
    CheckCall();
    machine_->StartFailed(streams->broken_rank(), opened);
    streams->Cancel();
    ctx_.jobs->Adopted(job_.id);
    return machine_->outcome();
  }
  machine_->Started();
  const absl::Status status = ReadAttempt(streams.get());
  ctx_.jobs->Adopted(job_.id);  // its shards held from now on are let go
  return status;
}

absl::Status JobRun::ReadAttempt(AttemptStreams* streams) {
  AttemptReaders readers(streams, machine_.get(), Events());
  AddShardStats(readers.ReadAll(), job_.plan, &stats_);
  stats_.set_tokens_per_second(job_.spec.context_tokens() / std::max(1e-9, SecondsSince(start_)));
  return machine_->outcome();
}

void JobRun::TakeBack(const JobRecord& r) {
  taken_back_ = true;
  accepted_sent_ = true;  // the client had it, or follows the job with WatchJob
  fetch_ticket_ = r.fetch_ticket();
  spool_path_ = r.spool_path();
  context_from_spool_ = r.context_from_spool();
  attempt_spooled_ = r.attempt_spooled();
  if (r.output_made()) {
    output_ = ReadyFile{
        FileId{static_cast<dev_t>(r.output_device()), static_cast<ino_t>(r.output_inode())},
        r.output_created()};
  }
  stats_.set_reruns(r.reruns());
  stats_.set_spooled(AllRanksSpooled());
  admitted_unix_seconds_ = r.admitted_unix_seconds();
  start_ -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(0.0, UnixSeconds() - admitted_unix_seconds_)));
  if (r.attempt() >= 0) {
    resume_.assign(r.workers().begin(), r.workers().end());
    lease_addresses_ = resume_;
    running_attempt_ = r.attempt();
  }
}

void JobRun::Record() const {
  JobRecord r;
  *r.mutable_spec() = job_.spec;
  r.set_context_path(job_.files.context.relative);
  r.set_context_device(job_.files.context_id.device);
  r.set_context_inode(job_.files.context_id.inode);
  r.set_output_path(job_.files.output.relative);
  if (output_) {
    r.set_output_made(true);
    r.set_output_created(output_->created);
    r.set_output_device(output_->id.device);
    r.set_output_inode(output_->id.inode);
  }
  r.set_deadline_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                             call_->capped_deadline().time_since_epoch())
                             .count());
  r.set_admitted_unix_seconds(admitted_unix_seconds_);
  r.set_attempt(running_attempt_);
  if (running_attempt_ >= 0)
    *r.mutable_workers() = {lease_addresses_.begin(), lease_addresses_.end()};
  r.set_fetch_ticket(fetch_ticket_);
  r.set_spool_path(spool_path_);
  r.set_context_from_spool(context_from_spool_);
  r.set_attempt_spooled(attempt_spooled_);
  for (const auto& [begin, tokens] : job_.plan.shards) r.add_shard_tokens(tokens);
  r.set_reruns(stats_.reruns());
  ctx_.jobs->SetRecord(job_.id, r);
}

AttemptEvents JobRun::Events() {
  return {
      .layers_done =
          [this](int layers) {
            v1::Progress p;
            p.set_stage(v1::Progress::LAYERS);
            p.set_layers_done(layers);
            p.set_layers_total(job_.plan.config.n_layers);
            p.set_tokens_total(job_.spec.context_tokens());
            WriteProgress(std::move(p));
          },
      .in_line = [this](const std::string& address) { ctx_.registry->InLine(address, job_.id); },
      .all_spooled =
          [this] {
            attempt_spooled_ = true;
            Record();
            ctx_.jobs->SetSpooled(job_.id);
          },
      // A client that vanished from its Submit call and its Transfer
      // streams at once fails its shards too: when the job is bound to
      // the call, that is the cause, whichever the coordinator heard of
      // first. A worker reports CANCELLED when the client's stream to it
      // broke; the end of the Submit call may reach this process a
      // moment after that report, so a job bound to its call gives it
      // kClientGoneGrace.
      .rank_failed =
          [this](const RankEnd& end) {
            if (end.from_worker && end.status.code() == absl::StatusCode::kCancelled &&
                BoundToCall())
              call_->EndsWithin(kClientGoneGrace);
            CheckCall();
          }};
}

void JobRun::FinishFailed(const absl::Status& status) {
  if (output_ && output_->created) (void)RemoveDataFile(job_.files.output, output_->id);
  // Peers that finished before the failure may have kept results.
  if (!lease_addresses_.empty()) transport_->Forget(job_.id, fetch_ticket_, lease_addresses_);
  ctx_.jobs->Finish(job_.id, InfoStatus(machine_->stage()), std::string(status.message()), stats_);
  ReportEnd(InfoStatus(machine_->stage()), status.message());
}

void JobRun::FinishSucceeded() {
  const v1::JobSpec& spec = job_.spec;
  const bool outputs_in_band = !spec.has_output_ref();
  const bool results_in_band =
      outputs_in_band || spec.query_tokens_size() > 0 || spec.return_state();
  ctx_.jobs->Retain(
      job_.id, std::make_shared<RetainedState>(RetainedState{spec.model(), lease_addresses_[0]}),
      results_in_band, outputs_in_band, RetainFor());
  ctx_.jobs->Finish(job_.id, v1::JobInfo::SUCCEEDED, "", stats_);
  ReportEnd(v1::JobInfo::SUCCEEDED);
  v1::SubmitResponse done;
  done.mutable_done()->set_job_id(job_.id);
  *done.mutable_done()->mutable_stats() = stats_;
  call_->Write(done);
}

void JobRun::OnCallEnded() {
  if (std::chrono::system_clock::now() >= call_->deadline()) {
    machine_->Cancel(CancelCause::kDeadline);
  } else if (BoundToCall()) {
    machine_->Cancel(CancelCause::kClientGone);
  }
}

// Whether the client going away ends the job: it asked so, or it sends
// tokens (context or query sets) and has not yet seen JobAccepted.
bool JobRun::BoundToCall() const {
  const bool sends_tokens =
      ShardTakesTokensInBand(job_.spec.has_context_ref(), 0, job_.spec.query_tokens_size() > 0);
  return job_.spec.cancel_on_disconnect() || (sends_tokens && !accepted_sent_);
}

// OnCallEnded, if the call has ended or its deadline passed (the watcher
// fires once; a detached job's deadline still bounds it).
void JobRun::CheckCall() {
  if (call_->ended() || std::chrono::system_clock::now() >= call_->deadline()) OnCallEnded();
}

bool JobRun::CanRerun() const {
  const bool client_there = !call_->ended();
  const bool context_again = job_.spec.has_context_ref() || AllRanksSpooled() || client_there;
  return context_again && (job_.spec.query_tokens_size() == 0 || client_there);
}

bool JobRun::AllRanksSpooled() const {
  return !spool_path_.empty() && !context_from_spool_ && attempt_spooled_;
}

// The first attempt of a job whose context comes in band gets a spool
// file, if the coordinator has a spool and it has room.
void JobRun::CreateSpool() {
  if (job_.spec.has_context_ref() || !spool_path_.empty() || !ctx_.spool->enabled()) return;
  absl::StatusOr<WireType> dtype = FromProto(job_.spec.dtype());
  absl::StatusOr<std::string> path =
      dtype.ok()
          ? ctx_.spool->Create(job_.id, job_.spec.context_tokens(), job_.spec.token_width(), *dtype)
          : dtype.status();
  if (!path.ok()) {
    Log(LogLevel::kWarn, "job_not_spooled",
        {{"job", job_.id}, {"reason", path.status().message()}});
    return;
  }
  spool_path_ = *std::move(path);
}

// Results the failed attempt's surviving workers may have kept (a rank
// that finished before another died) are of no use now.
void JobRun::ForgetEarlierAttempt(const std::string& gone) {
  std::vector<std::string> alive;
  for (const std::string& a : lease_addresses_)
    if (a != gone) alive.push_back(a);
  if (!alive.empty()) transport_->Forget(job_.id, fetch_ticket_, alive);
}

AttemptFacts JobRun::Facts(const std::string& ticket) const {
  return {.spec = &job_.spec,
          .files = &job_.files,
          .plan = &job_.plan,
          .job_id = job_.id,
          .attempt = stats_.reruns(),
          .ticket = ticket,
          .fetch_ticket = fetch_ticket_,
          .spool_path = spool_path_,
          .context_from_spool = context_from_spool_,
          .retain = RetainFor(),
          .collective_timeout_ms = ctx_.options.collective_timeout_ms,
          .upload_idle_timeout = ctx_.options.upload_idle_timeout};
}

std::chrono::seconds JobRun::RetainFor() const {
  return job_.spec.retain_seconds() > 0 ? std::chrono::seconds(job_.spec.retain_seconds())
                                        : ctx_.options.default_retain;
}

// To the client (if it is still there) and the job's record.
void JobRun::WriteProgress(v1::Progress progress) {
  progress.set_job_id(job_.id);
  progress.set_elapsed_seconds(SecondsSince(start_));
  ctx_.jobs->SetProgress(job_.id, progress);
  v1::SubmitResponse r;
  *r.mutable_progress() = std::move(progress);
  call_->Write(r);
}

// The job's end, to the log (job_ended) and the metrics (with its context
// and output bytes as its spec and model give them).
void JobRun::ReportEnd(v1::JobInfo::Status status, absl::string_view error) const {
  Log(status == v1::JobInfo::SUCCEEDED ? LogLevel::kInfo : LogLevel::kWarn, "job_ended",
      {{"job", job_.id},
       {"tenant", job_.spec.tenant()},
       {"status", v1::JobInfo::Status_Name(status)},
       {"error", error},
       {"seconds", stats_.seconds()},
       {"compute_seconds", stats_.compute_seconds()},
       {"reruns", stats_.reruns()},
       {"workers", lease_addresses_}});
  if (ctx_.metrics == nullptr) return;
  absl::StatusOr<WireType> dtype = FromProto(job_.spec.dtype());
  const int64_t tokens = job_.spec.context_tokens();
  const int64_t in = dtype.ok() ? tokens * job_.spec.token_width() * WireBytes(*dtype) : 0;
  ctx_.metrics->JobEnded(status, stats_, tokens, in, tokens * job_.plan.config.output_width() * 4);
}

}  // namespace lact::server
