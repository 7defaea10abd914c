// The Submit flow: a thin gRPC adapter around the job's state machine
// (job_machine.h). It admits the job, queues it for workers, starts the
// shards, relays their progress, and reports what the machine decided.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/data_files.h"
#include "common/log.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/in_band.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"
#include "server/job_files.h"
#include "server/job_flows.h"
#include "server/job_machine.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

using Clock = std::chrono::steady_clock;

// How long a failed shard of a job bound to its call waits for the call's
// end to be heard of, when its worker says the client went away.
constexpr absl::Duration kClientGoneGrace = absl::Seconds(2);

// Returns leased workers to the registry at scope exit.
class WorkerLease {
 public:
  WorkerLease(WorkerRegistry* registry, std::vector<std::string> addresses)
      : registry_(registry), addresses_(std::move(addresses)) {}
  ~WorkerLease() { registry_->Release(addresses_); }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  WorkerRegistry* registry_;
  std::vector<std::string> addresses_;
};

// 128 random bits as hex: the secret a client's Transfer and FetchResult
// streams present.
std::string NewTicket() {
  std::random_device random;
  std::string ticket;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&ticket, "%08x", random());
  return ticket;
}

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

// One Submit call from spec to done.
class SubmitFlow {
 public:
  SubmitFlow(const Coordinator& c, SubmitCall& call) : c_(c), call_(call) {}

  // `folder`: where in the data root the job's files may be (its
  // tenant's folder, or empty for the whole root).
  grpc::Status Run(const v1::SubmitRequest& request, const std::string& folder) {
    if (!request.has_spec()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kNoJobSpec);
    }
    spec_ = request.spec();
    absl::StatusOr<JobFiles> files = ResolveJobFiles(c_.options.data_root, folder, &spec_);
    if (!files.ok()) return ToGrpcStatus(files.status());
    files_ = *std::move(files);
    absl::StatusOr<JobPlan> plan = PlanJob(spec_, *c_.registry, c_.options.limits);
    if (!plan.ok()) return ToGrpcStatus(plan.status());
    plan_ = *std::move(plan);

    absl::StatusOr<std::string> id = c_.jobs->Create(spec_);
    if (!id.ok()) return ToGrpcStatus(id.status());
    job_id_ = *std::move(id);
    Log(LogLevel::kInfo, "job_admitted",
        {{"job", job_id_},
         {"tenant", spec_.tenant()},
         {"model", spec_.model()},
         {"context_tokens", spec_.context_tokens()},
         {"workers", plan_.workers},
         {"by_reference", spec_.has_context_ref()}});
    machine_ = std::make_shared<JobMachine>(job_id_);
    // A cancel wakes the queue, which looks at it only then.
    c_.jobs->SetCanceller(job_id_, [machine = machine_, registry = c_.registry](CancelCause cause) {
      const bool cancelled = machine->Cancel(cause);
      registry->WakeWaiters();
      return cancelled;
    });
    SubmitCall::EndWatch watch(&call_, [this] {
      OnCallEnded();
      c_.registry->WakeWaiters();
    });
    absl::Status status = Execute();
    stats_.set_spooled(AllRanksSpooled());
    // A job whose worker is gone runs again on others, when its context can
    // be read again (a file by reference, or its spool) and its results can
    // still be delivered.
    while (!status.ok() && CanRerun() && stats_.reruns() < c_.options.max_reruns) {
      std::string gone;
      if (!machine_->Retry(&gone)) break;
      // Before the next lease, so it is not chosen again.
      if (!gone.empty()) c_.registry->MarkFailed(gone);
      ForgetEarlierAttempt(gone);
      if (AllRanksSpooled()) ReadContextFromSpool();
      stats_.set_reruns(stats_.reruns() + 1);
      Log(LogLevel::kWarn, "job_rerun",
          {{"job", job_id_},
           {"cause", status.message()},
           {"rerun", stats_.reruns()},
           {"gone_worker", gone},
           {"context_from_spool", context_from_spool_}});
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
    if (!spool_path_.empty()) c_.spool->Remove(job_id_);
    c_.kv->EndJob(job_id_);
    if (std::optional<int> gone = machine_->gone_rank();
        gone && lease_addresses_.size() > static_cast<size_t>(*gone)) {
      c_.registry->MarkFailed(lease_addresses_[*gone]);
    }
    stats_.set_seconds(SecondsSince(start_));
    stats_.set_coordinator_peak_rss_bytes(PeakRssBytes());
    if (!status.ok()) {
      if (output_ && output_->created) (void)RemoveDataFile(files_.output, output_->id);
      // Peers that finished before the failure may have kept results.
      if (!lease_addresses_.empty())
        ForgetOnWorkers(c_.cluster, job_id_, fetch_ticket_, lease_addresses_);
      c_.jobs->Finish(job_id_, InfoStatus(machine_->stage()), std::string(status.message()),
                      stats_);
      ReportEnd(InfoStatus(machine_->stage()), status.message());
      return ToGrpcStatus(status);
    }
    c_.jobs->Retain(
        job_id_, std::make_shared<RetainedState>(RetainedState{spec_.model(), lease_addresses_[0]}),
        HasInBandResults(), RetainFor());
    c_.jobs->Finish(job_id_, v1::JobInfo::SUCCEEDED, "", stats_);
    ReportEnd(v1::JobInfo::SUCCEEDED);
    v1::SubmitResponse done;
    done.mutable_done()->set_job_id(job_id_);
    *done.mutable_done()->mutable_stats() = stats_;
    call_.Write(done);
    return grpc::Status::OK;
  }

 private:
  // The job's end, to the log (job_ended) and the metrics (with its
  // context and output bytes as its spec and model give them).
  void ReportEnd(v1::JobInfo::Status status, absl::string_view error = "") const {
    Log(status == v1::JobInfo::SUCCEEDED ? LogLevel::kInfo : LogLevel::kWarn, "job_ended",
        {{"job", job_id_},
         {"tenant", spec_.tenant()},
         {"status", v1::JobInfo::Status_Name(status)},
         {"error", error},
         {"seconds", stats_.seconds()},
         {"compute_seconds", stats_.compute_seconds()},
         {"reruns", stats_.reruns()},
         {"workers", lease_addresses_}});
    if (c_.metrics == nullptr) return;
    absl::StatusOr<WireType> dtype = FromProto(spec_.dtype());
    const int64_t tokens = spec_.context_tokens();
    const int64_t in = dtype.ok() ? tokens * spec_.token_width() * WireBytes(*dtype) : 0;
    c_.metrics->JobEnded(status, stats_, tokens, in, tokens * plan_.config.output_width() * 4);
  }

  // The call ended before the job did: its deadline bounds the job; the
  // client going away ends it only if the job is bound to its call.
  void OnCallEnded() {
    if (std::chrono::system_clock::now() >= call_.deadline()) {
      machine_->Cancel(CancelCause::kDeadline);
    } else if (BoundToCall()) {
      machine_->Cancel(CancelCause::kClientGone);
    }
  }

  // Whether the client going away ends the job.
  bool BoundToCall() const {
    return spec_.cancel_on_disconnect() || (ClientSendsTokens() && !accepted_sent_);
  }

  // OnCallEnded, if the call has ended or its deadline passed (the watcher
  // fires once; a detached job's deadline still bounds it).
  void CheckCall() {
    if (call_.ended() || std::chrono::system_clock::now() >= call_.deadline()) OnCallEnded();
  }

  // Whether a failed attempt can run again: its context can be read again
  // (a file by reference, or a spool every rank filled) or sent again, and
  // its query sets, if any, sent again: by their client, if it is still
  // there. Results in band go to the client if it is there, or are
  // retained for FetchResult.
  bool CanRerun() const {
    const bool client_there = !call_.ended();
    const bool context_again = spec_.has_context_ref() || AllRanksSpooled() || client_there;
    return context_again && (spec_.query_tokens_size() == 0 || client_there);
  }

  bool AllRanksSpooled() const {
    absl::MutexLock lock(&ranks_mu_);
    return !spool_path_.empty() && !context_from_spool_ && spooled_ranks_ == plan_.workers;
  }

  // From now on the job reads its context by reference, from its spool.
  void ReadContextFromSpool() {
    spec_.mutable_context_ref()->set_path(spool_path_);
    context_from_spool_ = true;
  }

  // Results the failed attempt's surviving workers may have kept (a rank
  // that finished before another died) are of no use now.
  void ForgetEarlierAttempt(const std::string& gone) {
    std::vector<std::string> alive;
    for (const std::string& a : lease_addresses_)
      if (a != gone) alive.push_back(a);
    if (!alive.empty()) ForgetOnWorkers(c_.cluster, job_id_, fetch_ticket_, alive);
  }

  // The first attempt of a job whose context comes in band gets a spool
  // file, if the coordinator has a spool and it has room.
  void CreateSpool() {
    if (spec_.has_context_ref() || !spool_path_.empty() || !c_.spool->enabled()) return;
    absl::StatusOr<WireType> dtype = FromProto(spec_.dtype());
    absl::StatusOr<std::string> path =
        dtype.ok() ? c_.spool->Create(job_id_, spec_.context_tokens(), spec_.token_width(), *dtype)
                   : dtype.status();
    if (!path.ok()) {
      Log(LogLevel::kWarn, "job_not_spooled",
          {{"job", job_id_}, {"reason", path.status().message()}});
      return;
    }
    spool_path_ = *std::move(path);
  }

  // Whether any token (context or query sets) comes in band: the client
  // that sends them must be there to see JobAccepted.
  bool ClientSendsTokens() const {
    return ShardTakesTokensInBand(spec_.has_context_ref(), 0, spec_.query_tokens_size() > 0);
  }
  bool HasInBandResults() const {
    return !spec_.has_output_ref() || spec_.query_tokens_size() > 0 || spec_.return_state();
  }

  // Whether rank r's client opens a Transfer stream (the rule ShardSpec.transfer states).
  bool NeedsTransfer(int rank) const {
    return ShardHasBytesInBand(spec_.has_context_ref(), spec_.has_output_ref(), rank,
                               spec_.query_tokens_size() > 0, spec_.return_state());
  }

  v1::Progress QueuedProgress(int position) const {
    v1::Progress p;
    p.set_stage(v1::Progress::QUEUED);
    p.set_queue_position(position);
    return p;
  }

  // To the client (if it is still there) and the job's record.
  void WriteProgress(v1::Progress progress) {
    progress.set_job_id(job_id_);
    progress.set_elapsed_seconds(SecondsSince(start_));
    c_.jobs->SetProgress(job_id_, progress);
    v1::SubmitResponse r;
    *r.mutable_progress() = std::move(progress);
    call_.Write(r);
  }

  // Queue, lease, start, collect: the job's outcome as its machine decided.
  absl::Status Execute() {
    const auto until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(
        call_.capped_deadline() - std::chrono::system_clock::now());
    WorkerRegistry::Wait wait{
        std::max(std::chrono::milliseconds(0), std::min(c_.options.acquire_wait, until_deadline)),
        c_.options.max_queued_jobs,
        [this] {
          CheckCall();
          return machine_->cancel_requested();
        },
        [this](int position) { WriteProgress(QueuedProgress(position)); }, spec_.tenant()};
    absl::StatusOr<std::vector<std::string>> leased =
        c_.registry->Acquire(spec_.model(), plan_.workers, wait);
    if (!leased.ok()) {
      CheckCall();  // a wait cut short by the deadline
      queue_failed_ = true;
      machine_->QueueFailed(leased.status());
      return machine_->outcome();
    }
    WorkerLease lease(c_.registry, *leased);
    if (!machine_->Leased(lease.addresses())) return machine_->outcome();
    lease_addresses_ = lease.addresses();
    // The dead attempt's shards, if any, stop meeting here now.
    c_.kv->BeginAttempt(job_id_, stats_.reruns());
    const std::string ticket = NewTicket();
    fetch_ticket_ = NewTicket();
    CreateSpool();
    {
      absl::MutexLock lock(&ranks_mu_);
      ranks_ended_ = 0;
      spooled_ranks_ = 0;
    }
    // Once: a re-run writes the rows of the file the first attempt made.
    if (!files_.output.empty() && !output_) {
      LACT_ASSIGN_OR_RETURN(
          output_, CreateOutputFile(files_.output, spec_.context_tokens(),
                                    plan_.config.output_width(), spec_.output_ref().replace(),
                                    spec_.has_context_ref() ? &files_.context_id : nullptr));
    }
    streams_ = std::make_shared<WorkerStreams>(c_.cluster, lease.addresses());
    machine_->SetCancelAction([streams = streams_] { streams->Cancel(); });
    const v1::SubmitResponse accepted = Accepted(ticket);
    v1::JobAccepted shown = accepted.accepted();
    shown.clear_ticket();  // the Transfer ticket is this call's client's alone
    c_.jobs->Start(job_id_, shown);
    Log(LogLevel::kInfo, "job_started", {{"job", job_id_}, {"workers", lease_addresses_}});
    if (absl::Status opened = streams_->Open(ShardSpecs(ticket), call_.capped_deadline());
        !opened.ok()) {
      CheckCall();  // an expired deadline is not the worker's fault
      machine_->StartFailed(streams_->broken_rank(), opened);
      streams_->Cancel();
      return machine_->outcome();
    }
    if (machine_->Started()) accepted_sent_ = call_.Write(accepted);
    if (!accepted_sent_) OnCallEnded();
    CollectShards();
    return machine_->outcome();
  }

  std::vector<v1::ShardSpec> ShardSpecs(const std::string& ticket) const {
    std::vector<v1::ShardSpec> specs;
    for (int r = 0; r < plan_.workers; ++r) {
      v1::ShardSpec s;
      s.set_job_id(job_id_);
      s.set_model(spec_.model());
      *s.mutable_options() = spec_.options();
      s.set_rank(r);
      s.set_world_size(plan_.workers);
      s.set_begin(plan_.shards[r].first);
      s.set_tokens(plan_.shards[r].second);
      s.set_total_tokens(spec_.context_tokens());
      // Per attempt: a dead attempt's shards, still waiting in the store,
      // never meet (or set keys for) the next attempt's.
      s.set_rendezvous_prefix(absl::StrCat(job_id_, "/", stats_.reruns(), "/"));
      s.set_collective_timeout_ms(c_.options.collective_timeout_ms);
      s.set_dtype(spec_.dtype());
      s.set_token_width(spec_.token_width());
      s.set_ticket(ticket);
      s.set_fetch_ticket(fetch_ticket_);
      s.set_tenant(spec_.tenant());
      s.set_transfer(NeedsTransfer(r));
      if (spec_.has_context_ref()) {
        s.mutable_context_ref()->set_path(context_from_spool_ ? spool_path_
                                                              : files_.context.relative);
        s.mutable_context_ref()->set_tensor(spec_.context_ref().tensor());
        s.set_context_from_spool(context_from_spool_);
      } else {
        s.set_spool_path(spool_path_);
      }
      if (spec_.has_output_ref()) s.mutable_output_ref()->set_path(files_.output.relative);
      if (r == 0) {
        *s.mutable_query_tokens() = spec_.query_tokens();
        s.set_return_state(spec_.return_state());
      }
      s.set_retain_seconds(RetainFor().count());
      s.set_upload_idle_timeout_ms(static_cast<int32_t>(c_.options.upload_idle_timeout.count()));
      specs.push_back(std::move(s));
    }
    return specs;
  }

  std::chrono::seconds RetainFor() const {
    return spec_.retain_seconds() > 0 ? std::chrono::seconds(spec_.retain_seconds())
                                      : c_.options.default_retain;
  }

  v1::SubmitResponse Accepted(const std::string& ticket) const {
    v1::SubmitResponse r;
    v1::JobAccepted* a = r.mutable_accepted();
    a->set_job_id(job_id_);
    a->set_output_width(plan_.config.output_width());
    a->set_ticket(ticket);
    a->set_fetch_ticket(fetch_ticket_);
    a->set_context_tokens(spec_.context_tokens());
    a->set_token_width(spec_.token_width());
    a->set_dtype(spec_.dtype());
    *a->mutable_query_tokens() = spec_.query_tokens();
    a->set_output_in_band(!spec_.has_output_ref());
    a->set_context_spooled(context_from_spool_);
    for (int rank = 0; rank < streams_->size(); ++rank) {
      v1::ShardRange* range = a->add_shards();
      range->set_worker(streams_->address(rank));
      range->set_begin(plan_.shards[rank].first);
      range->set_tokens(plan_.shards[rank].second);
      range->set_transfer(NeedsTransfer(rank));
    }
    return r;
  }

  // Reads one rank's stream to its end (rank 0's progress goes to the
  // client) and tells the machine how it ended.
  v1::ShardDone ReadRank(int rank) {
    v1::ShardDone done;
    v1::ShardResponse response;
    while (streams_->stream(rank)->Read(&response)) {
      if (response.has_layers_done()) {
        v1::Progress p;
        p.set_stage(v1::Progress::LAYERS);
        p.set_layers_done(response.layers_done());
        p.set_layers_total(plan_.config.n_layers);
        p.set_tokens_total(spec_.context_tokens());
        WriteProgress(std::move(p));
      } else if (response.has_done()) {
        done = response.done();
      } else if (response.kind_case() == v1::ShardResponse::kSpooled) {
        bool all_spooled;
        {
          absl::MutexLock lock(&ranks_mu_);
          all_spooled = ++spooled_ranks_ == plan_.workers;
        }
        if (all_spooled) c_.jobs->SetSpooled(job_id_);
      }
    }
    bool from_worker = true;
    const grpc::Status status = streams_->Finish(rank, &from_worker);
    {
      absl::MutexLock lock(&ranks_mu_);
      ++ranks_ended_;
    }
    // A client that vanished from its Submit call and its Transfer streams
    // at once fails its shards too: when the job is bound to the call, that
    // is the cause, whichever the coordinator heard of first. A worker
    // reports CANCELLED when the client's stream to it broke; the end of
    // the Submit call may reach this process a moment after that report,
    // so a job bound to its call gives it kClientGoneGrace to arrive.
    if (!status.ok()) {
      if (from_worker && status.error_code() == grpc::StatusCode::CANCELLED && BoundToCall())
        call_.EndsWithin(kClientGoneGrace);
      CheckCall();
    }
    if (!machine_->RankEnded(rank, {FromGrpcStatus(status), from_worker})) return done;
    if (from_worker && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      // Its group broke or timed out: if a peer died, that peer's own stream
      // is about to say so; give it a moment, so the dead worker is the one
      // blamed (and a peer that says nothing at all, the stalled one).
      bool all_spoke;
      {
        absl::MutexLock lock(&ranks_mu_);
        auto all_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ranks_mu_) {
          return ranks_ended_ == streams_->size();
        };
        all_spoke = ranks_mu_.AwaitWithTimeout(absl::Condition(&all_ended), absl::Seconds(1));
      }
      // A peer neither finished nor went away: it stalled (stopped, wedged).
      if (!all_spoke) machine_->PeersSilent();
    }
    streams_->Cancel();  // the others cannot finish without this rank
    return done;
  }

  // Waits for every rank (each read on its own thread, so one that fails
  // at once cancels peers still waiting for it); the job's statistics.
  void CollectShards() {
    std::vector<v1::ShardDone> dones(streams_->size());
    {
      std::vector<std::thread> readers;
      for (int r = 1; r < streams_->size(); ++r)
        readers.emplace_back([this, r, &dones] { dones[r] = ReadRank(r); });
      dones[0] = ReadRank(0);
      for (std::thread& t : readers) t.join();
    }
    double allreduce = 0, waited = 0, upload = 0, download = 0, in_bytes = 0, out_bytes = 0;
    bool delivered = true;
    for (const v1::ShardDone& d : dones) {
      stats_.set_compute_seconds(std::max(stats_.compute_seconds(), d.compute_seconds()));
      stats_.add_worker_peak_rss_bytes(d.peak_rss_bytes());
      allreduce += d.allreduce_seconds();
      waited += d.allreduce_waited_seconds();
      upload = std::max(upload, d.upload_seconds());
      download = std::max(download, d.download_seconds());
      in_bytes += static_cast<double>(d.context_bytes());
      out_bytes += static_cast<double>(d.output_bytes());
      delivered = delivered && d.results_delivered();
    }
    stats_.set_layers(plan_.config.n_layers);
    stats_.set_upload_seconds(upload);
    stats_.set_upload_mb_per_second(in_bytes / 1e6 / std::max(1e-9, upload));
    stats_.set_download_seconds(download);
    stats_.set_download_mb_per_second(out_bytes / 1e6 / std::max(1e-9, download));
    stats_.set_allreduce_seconds(allreduce);
    stats_.set_allreduce_hidden_fraction(
        allreduce > 0 ? std::clamp(1.0 - waited / allreduce, 0.0, 1.0) : 0.0);
    stats_.set_tokens_per_second(spec_.context_tokens() / std::max(1e-9, SecondsSince(start_)));
    stats_.set_coordinator_payload_bytes(0);
    stats_.set_results_delivered(delivered);
  }

  const Coordinator& c_;
  SubmitCall& call_;
  const Clock::time_point start_ = Clock::now();
  v1::JobSpec spec_;
  JobFiles files_;
  std::optional<ReadyFile> output_;  // the output file, once made
  JobPlan plan_;
  std::string job_id_;
  std::shared_ptr<JobMachine> machine_;
  std::vector<std::string> lease_addresses_;
  std::string fetch_ticket_;
  std::shared_ptr<WorkerStreams> streams_;
  std::atomic<bool> accepted_sent_{false};
  std::string spool_path_;  // the in-band context's spool file, if it has one
  bool context_from_spool_ = false;
  bool queue_failed_ = false;  // the last attempt got no workers
  mutable absl::Mutex ranks_mu_;
  int ranks_ended_ ABSL_GUARDED_BY(ranks_mu_) = 0;
  int spooled_ranks_ ABSL_GUARDED_BY(ranks_mu_) = 0;  // this attempt's
  v1::JobStats stats_;
};

}  // namespace

grpc::Status RunSubmit(const Coordinator& coordinator, const Caller& caller,
                       const v1::SubmitRequest& first, SubmitCall& call) {
  const grpc::Status status = [&] {
    if (coordinator.draining != nullptr && *coordinator.draining) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the coordinator is shutting down (it got SIGTERM) and takes no new "
                          "jobs; submit to its replacement");
    }
    if (caller.any_tenant || !first.has_spec()) return SubmitFlow(coordinator, call).Run(first, "");
    v1::SubmitRequest owned = first;  // the job belongs to the tenant whose token submitted it
    owned.mutable_spec()->set_tenant(caller.tenant);
    const std::string folder = coordinator.options.tenant_folders ? caller.tenant : "";
    return SubmitFlow(coordinator, call).Run(owned, folder);
  }();
  ReportCallEnd(coordinator, "Submit", caller, "", status);
  return status;
}

}  // namespace lact::server
