#include "server/job_flows.h"

#include <atomic>
#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/token_codec.h"
#include "proto/status_conversion.h"
#include "server/upload_receiver.h"
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

// Polls the client's call; when the client cancels or disconnects, calls
// `cancel`. With an idle limit, a client that sends nothing for that long
// while `*last_activity` (steady-clock ns; INT64_MAX = not waiting) is set
// has its call cancelled too, so a stalled upload cannot hold workers.
class CancelWatcher {
 public:
  CancelWatcher(grpc::ServerContext* context, std::function<void()> cancel,
                const std::atomic<int64_t>* last_activity = nullptr,
                std::chrono::milliseconds idle_limit = std::chrono::milliseconds(0))
      : thread_([this, context, cancel = std::move(cancel), last_activity, idle_limit] {
          while (!done_) {
            const int64_t now = Clock::now().time_since_epoch().count();
            if (last_activity != nullptr && idle_limit.count() > 0 &&
                now - last_activity->load() > std::chrono::nanoseconds(idle_limit).count()) {
              idle_ = true;
              context->TryCancel();
            }
            if (context->IsCancelled()) {
              cancel();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  bool idle() const { return idle_; }
  ~CancelWatcher() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::atomic<bool> idle_{false};
  std::thread thread_;
};

std::chrono::system_clock::time_point CallDeadline(grpc::ServerContext* context) {
  const auto cap = std::chrono::system_clock::now() + std::chrono::hours(24 * 7);
  return std::min(context->deadline(), cap);
}

v1::SubmitResponse ProgressMessage(v1::Progress::Stage stage, Clock::time_point start) {
  v1::SubmitResponse r;
  r.mutable_progress()->set_stage(stage);
  r.mutable_progress()->set_elapsed_seconds(Since(start));
  return r;
}

// Runs query sets on the worker at `address` against `state`; each output
// chunk (set k + 1) goes to `emit`.
absl::Status RunQuerySets(const std::string& address, const RetainedState& state, const std::vector<Tensor>& sets,
                          std::chrono::system_clock::time_point deadline,
                          const std::function<bool(const v1::SubmitResponse&)>& emit) {
  if (sets.empty()) return absl::OkStatus();
  auto stub = v1::Worker::NewStub(WorkerChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  auto stream = stub->RunQuery(&ctx);
  v1::WorkerQueryRequest request;
  request.mutable_header()->set_model(state.model);
  *request.mutable_header()->mutable_options() = state.options;
  for (const Tensor& s : sets) request.mutable_header()->add_query_tokens(s.dim(0));
  bool ok = stream->Write(request);
  for (const v1::Tensor& t : state.tensors) {
    v1::WorkerQueryRequest r;
    *r.mutable_state() = t;
    ok = ok && stream->Write(r);
  }
  for (size_t k = 0; k < sets.size() && ok; ++k) {
    const int64_t width = sets[k].dim(1), per_chunk = std::max<int64_t>(1, kMaxChunkBytes / (4 * width));
    for (int64_t t = 0; t < sets[k].dim(0) && ok; t += per_chunk) {
      const int64_t n = std::min(per_chunk, sets[k].dim(0) - t);
      v1::WorkerQueryRequest r;
      r.mutable_chunk()->set_set(static_cast<int>(k) + 1);
      r.mutable_chunk()->set_offset(t);
      r.mutable_chunk()->set_data(EncodeTokens(sets[k].ptr() + t * width, n * width, WireType::kF32));
      ok = stream->Write(r);
    }
  }
  stream->WritesDone();
  v1::ShardResponse response;
  while (stream->Read(&response)) {
    if (!response.has_output()) continue;
    v1::SubmitResponse out;
    v1::OutputChunk* chunk = out.mutable_output();
    chunk->set_set(response.output().set());
    chunk->set_offset(response.output().offset());
    chunk->set_data(response.output().data());
    if (!emit(out)) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("query on worker ", address, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

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
    absl::StatusOr<JobPlan> plan = PlanJob(spec_, *c_.registry, c_.options.limits);
    if (!plan.ok()) return ToGrpcStatus(plan.status());
    plan_ = *std::move(plan);
    absl::StatusOr<std::vector<std::string>> leased =
        c_.registry->Acquire(spec_.model(), plan_.workers, c_.options.acquire_wait);
    if (!leased.ok()) return ToGrpcStatus(leased.status());
    WorkerLease lease(c_.registry, *leased);
    job_id_ = c_.jobs->Create(spec_, plan_.workers);
    absl::Status status = Execute(lease);
    if (!status.ok()) status = CancellationCause(status);
    c_.kv->ErasePrefix(job_id_ + "/");
    stats_.set_seconds(Since(start_));
    stats_.set_coordinator_peak_rss_bytes(PeakRssBytes());
    if (!status.ok()) {
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
  absl::Status Execute(const WorkerLease& lease) {
    streams_ = std::make_shared<WorkerStreams>(lease.addresses(), plan_.shards);
    v1::ShardSpec shard;
    shard.set_job_id(job_id_);
    shard.set_model(spec_.model());
    *shard.mutable_options() = spec_.options();
    shard.set_total_tokens(spec_.context_tokens());
    shard.set_rendezvous_prefix(job_id_ + "/");
    shard.set_collective_timeout_ms(c_.options.collective_timeout_ms);
    std::shared_ptr<WorkerStreams> streams = streams_;
    c_.jobs->SetCanceller(job_id_, [streams] { streams->Cancel(); });
    last_chunk_ = Clock::now().time_since_epoch().count();
    CancelWatcher watcher(context_, [streams] { streams->Cancel(); }, &last_chunk_, c_.options.upload_idle_timeout);
    watcher_ = &watcher;
    if (absl::Status opened = streams_->Open(shard, CallDeadline(context_)); !opened.ok()) {
      c_.registry->MarkFailed(streams_->address(streams_->broken_rank()));
      return absl::UnavailableError(absl::StrCat("job ", job_id_, " failed: ", opened.message()));
    }

    v1::SubmitResponse accepted;
    accepted.mutable_accepted()->set_job_id(job_id_);
    accepted.mutable_accepted()->set_output_width(plan_.config.output_width());
    for (int r = 0; r < streams_->size(); ++r) {
      v1::ShardRange* range = accepted.mutable_accepted()->add_shards();
      range->set_worker(streams_->address(r));
      range->set_begin(plan_.shards[r].first);
      range->set_tokens(plan_.shards[r].second);
    }
    if (!stream_->Write(accepted)) return Cancelled("the client went away");
    std::vector<Tensor> queries;
    LACT_RETURN_IF_ERROR(Upload(&queries));
    LACT_RETURN_IF_ERROR(CollectShards());
    auto state = std::make_shared<RetainedState>(RetainedState{spec_.model(), spec_.options(), std::move(state_)});
    const std::chrono::seconds ttl =
        spec_.retain_seconds() > 0 ? std::chrono::seconds(spec_.retain_seconds()) : c_.options.default_retain;
    c_.jobs->Retain(job_id_, state, ttl);
    if (!queries.empty()) {
      stream_->Write(ProgressMessage(v1::Progress::QUERIES, start_));
      LACT_RETURN_IF_ERROR(RunQuerySets(lease.addresses()[0], *state, queries, CallDeadline(context_),
                                        [this](const v1::SubmitResponse& r) { return Emit(r); }));
      auto info = c_.jobs->Get(job_id_);
      if (info.ok() && info->status() == v1::JobInfo::CANCELLED) return Cancelled("CancelJob during the queries");
    }
    if (spec_.return_state()) {
      for (const v1::Tensor& t : state->tensors) {
        v1::SubmitResponse r;
        *r.mutable_state() = t;
        if (!stream_->Write(r)) return Cancelled("the client went away");
      }
    }
    return absl::OkStatus();
  }

  // A failure caused by a cancellation (CancelJob, the client going away or
  // its deadline) is reported as that, not as the worker errors it caused.
  absl::Status CancellationCause(const absl::Status& failure) {
    if (watcher_ != nullptr && watcher_->idle()) {
      return absl::DeadlineExceededError(absl::StrCat("job ", job_id_, " cancelled: no token chunk for ",
                                                      c_.options.upload_idle_timeout.count(),
                                                      " ms during the upload"));
    }
    auto info = c_.jobs->Get(job_id_);
    if (info.ok() && info->status() == v1::JobInfo::CANCELLED) {
      return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled by CancelJob"));
    }
    if (context_->IsCancelled() && failure.code() != absl::StatusCode::kCancelled) {
      const bool expired = std::chrono::system_clock::now() >= context_->deadline();
      return expired ? absl::DeadlineExceededError(absl::StrCat("job ", job_id_, ": the call's deadline expired"))
                     : absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled: the client went away"));
    }
    return failure;
  }

  absl::Status Cancelled(const std::string& why) {
    streams_->Cancel();
    return absl::CancelledError(absl::StrCat("job ", job_id_, " cancelled: ", why));
  }

  bool Emit(const v1::SubmitResponse& r) {
    v1::SubmitResponse out = r;
    if (out.has_output()) {
      out.mutable_output()->set_tokens(static_cast<int64_t>(out.output().data().size()) /
                                       (4 * plan_.config.output_width()));
    }
    return stream_->Write(out);
  }

  absl::Status Upload(std::vector<Tensor>* queries) {
    UploadReceiver receiver(spec_.context_tokens(), {spec_.query_tokens().begin(), spec_.query_tokens().end()},
                            spec_.token_width(), plan_.dtype);
    const int64_t width = spec_.token_width();
    auto sink = [&](int64_t offset, int64_t n, std::string f32_bytes) {
      return streams_->Forward(offset, n, width, std::move(f32_bytes));
    };
    v1::SubmitRequest request;
    auto last_progress = Clock::now();
    // The idle clock runs only while waiting for the client, not while a
    // slow worker holds up a forward.
    while ((last_chunk_ = Clock::now().time_since_epoch().count(), stream_->Read(&request))) {
      if (!request.has_chunk()) {
        streams_->Cancel();
        return absl::InvalidArgumentError("after the JobSpec, Submit takes only token chunks");
      }
      absl::Status s = receiver.Accept(request.mutable_chunk(), sink);
      if (!s.ok()) {
        const bool cancelled = streams_->cancelled() || context_->IsCancelled();
        streams_->Cancel();
        if (streams_->broken_rank() < 0) return s;  // the client's chunk was bad
        if (cancelled) return s;                     // the worker was cancelled, not lost
        c_.registry->MarkFailed(streams_->address(streams_->broken_rank()));
        return absl::UnavailableError(absl::StrCat("job ", job_id_, " failed: ", s.message()));
      }
      if (Since(last_progress) > 0.5) {
        last_progress = Clock::now();
        v1::SubmitResponse p = ProgressMessage(v1::Progress::UPLOAD, start_);
        p.mutable_progress()->set_tokens_done(receiver.context_received());
        p.mutable_progress()->set_tokens_total(spec_.context_tokens());
        stream_->Write(p);
      }
    }
    if (context_->IsCancelled()) return Cancelled("the client disconnected during the upload");
    absl::Status complete = receiver.CheckComplete();
    if (!complete.ok()) {
      streams_->Cancel();
      return complete;
    }
    streams_->CloseUploads();
    last_chunk_ = std::numeric_limits<int64_t>::max();  // the upload is over
    stats_.set_upload_seconds(Since(start_));
    stats_.set_upload_mb_per_second(receiver.bytes_received() / 1e6 / std::max(1e-9, stats_.upload_seconds()));
    *queries = receiver.TakeQueries();
    return absl::OkStatus();
  }

  // Relays every rank's stream in rank order (so outputs leave in token order).
  absl::Status CollectShards() {
    std::vector<std::string> errors;
    double allreduce = 0, waited = 0;
    stats_.set_layers(plan_.config.n_layers);
    for (int r = 0; r < streams_->size(); ++r) {
      v1::ShardResponse response;
      while (errors.empty() && streams_->stream(r)->Read(&response)) {
        if (response.has_layers_done()) {
          v1::SubmitResponse p = ProgressMessage(v1::Progress::LAYERS, start_);
          p.mutable_progress()->set_layers_done(response.layers_done());
          p.mutable_progress()->set_layers_total(plan_.config.n_layers);
          p.mutable_progress()->set_tokens_total(spec_.context_tokens());
          stream_->Write(p);
        } else if (response.has_output()) {
          v1::SubmitResponse out;
          out.mutable_output()->set_set(0);
          out.mutable_output()->set_offset(streams_->begin(r) + response.output().offset());
          out.mutable_output()->set_data(std::move(*response.mutable_output()->mutable_data()));
          if (!Emit(out)) errors.push_back("the client went away");
        } else if (response.has_state()) {
          state_.push_back(std::move(*response.mutable_state()));
        } else if (response.has_done()) {
          const v1::ShardDone& d = response.done();
          stats_.set_compute_seconds(std::max(stats_.compute_seconds(), d.compute_seconds()));
          stats_.add_worker_peak_rss_bytes(d.peak_rss_bytes());
          allreduce += d.allreduce_seconds();
          waited += d.allreduce_waited_seconds();
        }
      }
      if (!errors.empty()) streams_->Cancel();
      grpc::Status s = streams_->Finish(r);
      if (!s.ok()) {
        const bool cancelled = streams_->cancelled();
        streams_->Cancel();
        if (!cancelled && s.error_code() == grpc::StatusCode::UNAVAILABLE &&
            !absl::StrContains(s.error_message(), "gloo")) {
          c_.registry->MarkFailed(streams_->address(r));
        }
        errors.push_back(absl::StrCat("worker ", streams_->address(r), " (rank ", r, "): ", s.error_message()));
      }
    }
    stats_.set_allreduce_seconds(allreduce);
    stats_.set_allreduce_hidden_fraction(allreduce > 0 ? std::clamp(1.0 - waited / allreduce, 0.0, 1.0) : 0.0);
    stats_.set_tokens_per_second(spec_.context_tokens() / std::max(1e-9, Since(start_)));
    if (errors.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("job ", job_id_, " failed: ", absl::StrJoin(errors, "; ")));
  }

  const Coordinator& c_;
  grpc::ServerContext* context_;
  grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream_;
  const Clock::time_point start_ = Clock::now();
  v1::JobSpec spec_;
  JobPlan plan_;
  std::string job_id_;
  std::shared_ptr<WorkerStreams> streams_;
  std::atomic<int64_t> last_chunk_{std::numeric_limits<int64_t>::max()};
  const CancelWatcher* watcher_ = nullptr;  // valid while Execute runs
  std::vector<v1::Tensor> state_;
  v1::JobStats stats_;
};

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
  absl::StatusOr<std::shared_ptr<const RetainedState>> state = c.jobs->State(spec.job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  absl::StatusOr<ModelConfig> config = c.registry->FindModel((*state)->model);
  if (!config.ok()) return ToGrpcStatus(config.status());
  if (spec.token_width() != config->input_width()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("token_width ", spec.token_width(), " does not match the job's model, which takes ",
                                     config->input_width(), " features per token"));
  }
  absl::StatusOr<WireType> dtype = ToWireType(spec.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  if (spec.query_tokens().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no query sets");
  absl::Status sets_ok = CheckQuerySets(spec.query_tokens(), c.options.limits);
  if (!sets_ok.ok()) return ToGrpcStatus(sets_ok);
  UploadReceiver receiver(0, {spec.query_tokens().begin(), spec.query_tokens().end()}, spec.token_width(), *dtype);
  auto no_context = [](int64_t, int64_t, std::string) { return absl::OkStatus(); };
  while (stream->Read(&request)) {
    absl::Status s = request.has_chunk() ? receiver.Accept(request.mutable_chunk(), no_context)
                                         : absl::InvalidArgumentError("after the QuerySpec, Query takes only chunks");
    if (!s.ok()) return ToGrpcStatus(s);
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  absl::Status complete = receiver.CheckComplete();
  if (!complete.ok()) return ToGrpcStatus(complete);
  // Lease the worker only now: a client that stalls mid-upload holds none.
  absl::StatusOr<std::vector<std::string>> leased = c.registry->Acquire((*state)->model, 1, c.options.acquire_wait);
  if (!leased.ok()) return ToGrpcStatus(leased.status());
  WorkerLease lease(c.registry, *leased);
  const int64_t out_width = config->output_width();
  absl::Status s = RunQuerySets(lease.addresses()[0], **state, receiver.TakeQueries(), CallDeadline(context),
                                [&](const v1::SubmitResponse& r) {
                                  v1::SubmitResponse out = r;
                                  out.mutable_output()->set_tokens(
                                      static_cast<int64_t>(out.output().data().size()) / (4 * out_width));
                                  return stream->Write(out);
                                });
  if (!s.ok()) return ToGrpcStatus(s);
  v1::SubmitResponse done;
  done.mutable_done()->set_job_id(spec.job_id());
  stream->Write(done);
  return grpc::Status::OK;
}

}  // namespace lact::server
