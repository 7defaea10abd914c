#include "server/job_flows.h"

#include <unistd.h>

#include <atomic>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_files.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "proto/in_band.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"
#include "server/job_files.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

// Polls the client's call; when the client cancels or disconnects (or its
// deadline passes), calls `cancel` once.
class CancelWatcher {
 public:
  CancelWatcher(grpc::ServerContext* context, std::function<void()> cancel)
      : thread_([this, context, cancel = std::move(cancel)] {
          while (!done_) {
            if (context->IsCancelled()) {
              cancel();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~CancelWatcher() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::chrono::system_clock::time_point CallDeadline(grpc::ServerContext* context) {
  const auto cap = std::chrono::system_clock::now() + std::chrono::hours(24 * 7);
  return std::min(context->deadline(), cap);
}

// 128 random bits as hex: the secret a client's Transfer streams present.
std::string NewTicket() {
  std::random_device random;
  std::string ticket;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&ticket, "%08x", random());
  return ticket;
}

// How one rank's RunShard stream ended.
struct RankOutcome {
  grpc::Status status;
  bool from_worker = true;  // false: the transport broke (the worker is gone)
  v1::ShardDone done;
};

// One Submit call from spec to done.
class SubmitFlow {
 public:
  SubmitFlow(const Coordinator& c, grpc::ServerContext* context,
             grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream)
      : c_(c), context_(context), stream_(stream) {}

  grpc::Status Run() {
    v1::SubmitRequest request;
    if (!stream_->Read(&request) || !request.has_spec()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first Submit message must be a JobSpec");
    }
    spec_ = request.spec();
    absl::StatusOr<JobFiles> files = ResolveJobFiles(c_.options.data_root, &spec_);
    if (!files.ok()) return ToGrpcStatus(files.status());
    files_ = *std::move(files);
    absl::StatusOr<JobPlan> plan = PlanJob(spec_, *c_.registry, c_.options.limits);
    if (!plan.ok()) return ToGrpcStatus(plan.status());
    plan_ = *std::move(plan);
    WorkerRegistry::Wait wait{c_.options.acquire_wait, c_.options.max_queued_jobs,
                              [this] { return CallGone(); }, [this](int position) {
                                v1::SubmitResponse p;
                                p.mutable_progress()->set_stage(v1::Progress::QUEUED);
                                p.mutable_progress()->set_queue_position(position);
                                p.mutable_progress()->set_elapsed_seconds(Since(start_));
                                stream_->Write(p);
                              }};
    absl::StatusOr<std::vector<std::string>> leased = c_.registry->Acquire(spec_.model(), plan_.workers, wait);
    if (!leased.ok()) return ToGrpcStatus(leased.status());
    WorkerLease lease(c_.registry, *leased);
    job_id_ = c_.jobs->Create(spec_, plan_.workers);
    absl::Status status = Execute(lease);
    if (!status.ok()) status = CancellationCause(status);
    c_.kv->ErasePrefix(job_id_ + "/");
    stats_.set_seconds(Since(start_));
    stats_.set_coordinator_peak_rss_bytes(PeakRssBytes());
    if (!status.ok()) {
      if (output_created_) unlink(files_.output.c_str());
      const bool cancelled = status.code() == absl::StatusCode::kCancelled;
      c_.jobs->Finish(job_id_, cancelled ? v1::JobInfo::CANCELLED : v1::JobInfo::FAILED,
                      std::string(status.message()), stats_);
      return ToGrpcStatus(status);
    }
    c_.jobs->Finish(job_id_, v1::JobInfo::SUCCEEDED, "", stats_);
    v1::SubmitResponse done;
    done.mutable_done()->set_job_id(job_id_);
    *done.mutable_done()->mutable_stats() = stats_;
    stream_->Write(done);
    return grpc::Status::OK;
  }

 private:
  // Whether the job runs on when its Submit call ends early: all its bytes
  // go by reference, and the client did not ask otherwise.
  bool OutlivesCall() const {
    for (int r = 0; r < plan_.workers; ++r) {
      if (NeedsTransfer(r)) return false;
    }
    return !spec_.cancel_on_disconnect();
  }

  bool CallGone() const { return !OutlivesCall() && context_->IsCancelled(); }

  std::chrono::system_clock::time_point JobDeadline() const {
    return OutlivesCall() ? std::chrono::system_clock::now() + std::chrono::hours(24 * 7) : CallDeadline(context_);
  }

  // Whether rank r's client opens a Transfer stream (the rule ShardSpec.transfer states).
  bool NeedsTransfer(int rank) const {
    return ShardHasBytesInBand(spec_.has_context_ref(), spec_.has_output_ref(), rank, spec_.query_tokens_size() > 0,
                               spec_.return_state());
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
      s.set_rendezvous_prefix(job_id_ + "/");
      s.set_collective_timeout_ms(c_.options.collective_timeout_ms);
      s.set_dtype(spec_.dtype());
      s.set_token_width(spec_.token_width());
      s.set_ticket(ticket);
      s.set_transfer(NeedsTransfer(r));
      if (spec_.has_context_ref()) {
        s.mutable_context_ref()->set_path(files_.context);
        s.mutable_context_ref()->set_tensor(spec_.context_ref().tensor());
      }
      if (spec_.has_output_ref()) s.mutable_output_ref()->set_path(files_.output);
      if (r == 0) {
        *s.mutable_query_tokens() = spec_.query_tokens();
        s.set_return_state(spec_.return_state());
        s.set_retain_seconds(RetainFor().count());
      }
      s.set_upload_idle_timeout_ms(static_cast<int32_t>(c_.options.upload_idle_timeout.count()));
      specs.push_back(std::move(s));
    }
    return specs;
  }

  std::chrono::seconds RetainFor() const {
    return spec_.retain_seconds() > 0 ? std::chrono::seconds(spec_.retain_seconds()) : c_.options.default_retain;
  }

  absl::Status Execute(const WorkerLease& lease) {
    const std::string ticket = NewTicket();
    if (!files_.output.empty()) {
      LACT_RETURN_IF_ERROR(CreateOutputFile(files_.output, spec_.context_tokens(), plan_.config.output_width()));
      output_created_ = true;
    }
    streams_ = std::make_shared<WorkerStreams>(lease.addresses());
    std::shared_ptr<WorkerStreams> streams = streams_;
    c_.jobs->SetCanceller(job_id_, [streams] { streams->Cancel(); });
    std::optional<CancelWatcher> watcher;
    if (!OutlivesCall()) watcher.emplace(context_, [streams] { streams->Cancel(); });
    if (absl::Status opened = streams_->Open(ShardSpecs(ticket), JobDeadline()); !opened.ok()) {
      c_.registry->MarkFailed(streams_->address(streams_->broken_rank()));
      streams_->Cancel();
      return absl::UnavailableError(absl::StrCat("job ", job_id_, " failed: ", opened.message()));
    }
    if (!stream_->Write(Accepted(ticket)) && !OutlivesCall()) {
      streams_->Cancel();
      return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled: the client went away"));
    }
    LACT_RETURN_IF_ERROR(CollectShards());
    c_.jobs->Retain(job_id_, std::make_shared<RetainedState>(RetainedState{spec_.model(), lease.addresses()[0]}),
                    RetainFor());
    return absl::OkStatus();
  }

  v1::SubmitResponse Accepted(const std::string& ticket) const {
    v1::SubmitResponse r;
    v1::JobAccepted* a = r.mutable_accepted();
    a->set_job_id(job_id_);
    a->set_output_width(plan_.config.output_width());
    a->set_ticket(ticket);
    a->set_context_tokens(spec_.context_tokens());
    a->set_token_width(spec_.token_width());
    a->set_dtype(spec_.dtype());
    for (int rank = 0; rank < streams_->size(); ++rank) {
      v1::ShardRange* range = a->add_shards();
      range->set_worker(streams_->address(rank));
      range->set_begin(plan_.shards[rank].first);
      range->set_tokens(plan_.shards[rank].second);
      range->set_transfer(NeedsTransfer(rank));
    }
    return r;
  }

  // Reads one rank's stream to its end; rank 0's progress goes to the client.
  RankOutcome ReadRank(int rank) {
    RankOutcome outcome;
    v1::ShardResponse response;
    while (streams_->stream(rank)->Read(&response)) {
      if (response.has_layers_done()) {
        v1::SubmitResponse p;
        p.mutable_progress()->set_stage(v1::Progress::LAYERS);
        p.mutable_progress()->set_elapsed_seconds(Since(start_));
        p.mutable_progress()->set_layers_done(response.layers_done());
        p.mutable_progress()->set_layers_total(plan_.config.n_layers);
        p.mutable_progress()->set_tokens_total(spec_.context_tokens());
        c_.jobs->SetProgress(job_id_, p.progress());
        stream_->Write(p);
      } else if (response.has_done()) {
        outcome.done = response.done();
      }
    }
    outcome.status = streams_->Finish(rank, &outcome.from_worker);
    ++ranks_ended_;
    if (outcome.status.ok()) return outcome;
    if (outcome.from_worker && outcome.status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // Its group broke: if a peer died, that peer's own stream is about to
      // say so; give it a moment, so the dead worker is the one blamed.
      const auto grace = Clock::now() + std::chrono::seconds(1);
      while (ranks_ended_ < streams_->size() && Clock::now() < grace) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    streams_->Cancel();  // the others cannot finish without this rank
    return outcome;
  }

  // Waits for every rank (each read on its own thread, so one that fails
  // at once cancels peers still waiting for it); the job's statistics.
  absl::Status CollectShards() {
    std::vector<RankOutcome> outcomes(streams_->size());
    {
      std::vector<std::thread> readers;
      for (int r = 1; r < streams_->size(); ++r) readers.emplace_back([this, r, &outcomes] { outcomes[r] = ReadRank(r); });
      outcomes[0] = ReadRank(0);
      for (std::thread& t : readers) t.join();
    }
    LACT_RETURN_IF_ERROR(FailureOf(outcomes));
    double allreduce = 0, waited = 0, upload = 0, download = 0, in_bytes = 0, out_bytes = 0;
    for (const RankOutcome& o : outcomes) {
      const v1::ShardDone& d = o.done;
      stats_.set_compute_seconds(std::max(stats_.compute_seconds(), d.compute_seconds()));
      stats_.add_worker_peak_rss_bytes(d.peak_rss_bytes());
      allreduce += d.allreduce_seconds();
      waited += d.allreduce_waited_seconds();
      upload = std::max(upload, d.upload_seconds());
      download = std::max(download, d.download_seconds());
      in_bytes += static_cast<double>(d.context_bytes());
      out_bytes += static_cast<double>(d.output_bytes());
    }
    stats_.set_layers(plan_.config.n_layers);
    stats_.set_upload_seconds(upload);
    stats_.set_upload_mb_per_second(in_bytes / 1e6 / std::max(1e-9, upload));
    stats_.set_download_seconds(download);
    stats_.set_download_mb_per_second(out_bytes / 1e6 / std::max(1e-9, download));
    stats_.set_allreduce_seconds(allreduce);
    stats_.set_allreduce_hidden_fraction(allreduce > 0 ? std::clamp(1.0 - waited / allreduce, 0.0, 1.0) : 0.0);
    stats_.set_tokens_per_second(spec_.context_tokens() / std::max(1e-9, Since(start_)));
    stats_.set_coordinator_payload_bytes(0);
    return absl::OkStatus();
  }

  // The job's failure from its ranks' outcomes: a worker whose transport
  // broke (it is gone, and is marked failed) explains its peers' failures;
  // otherwise the first failure a worker's handler reported (the others
  // are the cancellations it caused here).
  absl::Status FailureOf(const std::vector<RankOutcome>& outcomes) {
    int culprit = -1;
    for (int r = 0; r < static_cast<int>(outcomes.size()); ++r) {
      const grpc::Status& s = outcomes[r].status;
      if (s.ok()) continue;
      if (!outcomes[r].from_worker && s.error_code() == grpc::StatusCode::UNAVAILABLE) {
        c_.registry->MarkFailed(streams_->address(r));
        return absl::UnavailableError(absl::StrCat("job ", job_id_, " failed: worker ", streams_->address(r),
                                                   " (rank ", r, ") is gone: ", s.error_message()));
      }
      if (culprit < 0 || (outcomes[r].from_worker && !outcomes[culprit].from_worker)) culprit = r;
    }
    if (culprit < 0) return absl::OkStatus();
    const grpc::Status& s = outcomes[culprit].status;
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("job ", job_id_, " failed: worker ", streams_->address(culprit), " (rank ",
                                     culprit, "): ", s.error_message()));
  }

  // A failure caused by a cancellation (CancelJob, the client going away or
  // its deadline) is reported as that, not as the worker errors it caused.
  absl::Status CancellationCause(const absl::Status& failure) {
    auto info = c_.jobs->Get(job_id_);
    if (info.ok() && info->status() == v1::JobInfo::CANCELLED) {
      return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled by CancelJob"));
    }
    if (CallGone()) {
      const bool expired = std::chrono::system_clock::now() >= context_->deadline();
      return expired ? absl::DeadlineExceededError(absl::StrCat("job ", job_id_, ": the call's deadline expired"))
                     : absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled: the client went away"));
    }
    return failure;
  }

  const Coordinator& c_;
  grpc::ServerContext* context_;
  grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream_;
  const Clock::time_point start_ = Clock::now();
  v1::JobSpec spec_;
  JobFiles files_;
  bool output_created_ = false;
  JobPlan plan_;
  std::string job_id_;
  std::shared_ptr<WorkerStreams> streams_;
  std::atomic<int> ranks_ended_{0};
  v1::JobStats stats_;
};

// Passes the client's query chunks to the worker keeping the state, and
// its outputs back; counts the bytes relayed.
absl::Status RelayQuery(const RetainedState& kept, const v1::QuerySpec& spec, int64_t output_width,
                        grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::SubmitResponse, v1::QueryRequest>* stream, int64_t* payload) {
  auto stub = v1::Worker::NewStub(WorkerChannel(kept.worker));
  grpc::ClientContext ctx;
  ctx.set_deadline(CallDeadline(context));
  auto worker = stub->RunQuery(&ctx);
  CancelWatcher watcher(context, [&ctx] { ctx.TryCancel(); });
  v1::WorkerQueryRequest header;
  header.mutable_header()->set_job_id(spec.job_id());
  *header.mutable_header()->mutable_query_tokens() = spec.query_tokens();
  header.mutable_header()->set_dtype(spec.dtype());
  bool ok = worker->Write(header);
  v1::QueryRequest request;
  absl::Status bad;
  while (ok && stream->Read(&request)) {
    if (!request.has_chunk()) {
      bad = absl::InvalidArgumentError("after the QuerySpec, Query takes only chunks");
      ctx.TryCancel();
      break;
    }
    *payload += static_cast<int64_t>(request.chunk().data().size());
    v1::WorkerQueryRequest r;
    *r.mutable_chunk() = std::move(*request.mutable_chunk());
    ok = worker->Write(r);
  }
  worker->WritesDone();
  v1::ShardResponse response;
  while (bad.ok() && worker->Read(&response)) {
    if (!response.has_output()) continue;
    v1::SubmitResponse out;
    v1::OutputChunk* chunk = out.mutable_output();
    chunk->set_set(response.output().set());
    chunk->set_offset(response.output().offset());
    chunk->set_tokens(static_cast<int64_t>(response.output().data().size()) / (4 * output_width));
    *payload += static_cast<int64_t>(response.output().data().size());
    chunk->set_data(std::move(*response.mutable_output()->mutable_data()));
    if (!stream->Write(out)) {
      ctx.TryCancel();
      bad = absl::CancelledError("the client went away");
    }
  }
  grpc::Status s = worker->Finish();
  LACT_RETURN_IF_ERROR(bad);
  if (context->IsCancelled()) return absl::CancelledError("the client went away");
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("query on worker ", kept.worker, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status RunSubmit(const Coordinator& coordinator, grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream) {
  return SubmitFlow(coordinator, context, stream).Run();
}

grpc::Status RunQuery(const Coordinator& c, grpc::ServerContext* context,
                      grpc::ServerReaderWriter<v1::SubmitResponse, v1::QueryRequest>* stream) {
  v1::QueryRequest request;
  if (!stream->Read(&request) || !request.has_spec()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first Query message must be a QuerySpec");
  }
  const v1::QuerySpec spec = request.spec();
  absl::StatusOr<std::shared_ptr<const RetainedState>> kept = c.jobs->State(spec.job_id());
  if (!kept.ok()) return ToGrpcStatus(kept.status());
  absl::StatusOr<ModelConfig> config = c.registry->FindModel((*kept)->model);
  if (!config.ok()) return ToGrpcStatus(config.status());
  if (spec.token_width() != config->input_width()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("token_width ", spec.token_width(), " does not match the job's model, which takes ",
                                     config->input_width(), " features per token"));
  }
  absl::StatusOr<WireType> dtype = FromProto(spec.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  if (spec.query_tokens().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no query sets");
  absl::Status sets_ok = CheckQuerySets(spec.query_tokens(), c.options.limits);
  if (!sets_ok.ok()) return ToGrpcStatus(sets_ok);
  int64_t payload = 0;
  absl::Status s = RelayQuery(**kept, spec, config->output_width(), context, stream, &payload);
  if (!s.ok()) return ToGrpcStatus(s);
  v1::SubmitResponse done;
  done.mutable_done()->set_job_id(spec.job_id());
  done.mutable_done()->mutable_stats()->set_coordinator_payload_bytes(payload);
  stream->Write(done);
  return grpc::Status::OK;
}

}  // namespace lact::server
