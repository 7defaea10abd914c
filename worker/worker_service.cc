#include "worker/worker_service.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/fused_state.h"
#include "common/huge_pages.h"
#include "common/log.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/in_band.h"
#include "proto/job_options.h"
#include "proto/metadata_keys.h"
#include "proto/status_conversion.h"
#include "proto/stream_call.h"
#include "worker/kv_store_client.h"
#include "worker/output_file_stream.h"

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;
using ShardCall = StreamCall<v1::ShardRequest, v1::ShardResponse>;
using QueryCall = StreamCall<v1::WorkerQueryRequest, v1::ShardResponse>;

// How long outputs that reached the client are kept, for a client that
// died with the last messages in flight.
constexpr std::chrono::seconds kDeliveredGrace(60);

struct JobModel {
  std::shared_ptr<const Model> model;
  ModelConfig config;  // with the job's overrides
};

absl::StatusOr<JobModel> ResolveJobModel(ModelCache& models, const std::string& name,
                                         const v1::JobOptions& o) {
  JobModel m;
  LACT_ASSIGN_OR_RETURN(m.model, models.Get(name));
  LACT_ASSIGN_OR_RETURN(m.config, ApplyJobOptions(m.model->config(), FromProto(o)));
  return m;
}

// The shard's rows of the context file, checked against the job, read
// into huge pages if `huge_pages`.
absl::StatusOr<Tensor> ReadContextRows(const std::string& data_root, const v1::ShardSpec& spec,
                                       int64_t width, bool huge_pages, int64_t* bytes) {
  LACT_ASSIGN_OR_RETURN(const DataPath path, ResolveDataPath(data_root, spec.context_ref().path()));
  LACT_ASSIGN_OR_RETURN(TokenFileLayout file, OpenTokenFile(path, spec.context_ref().tensor()));
  if (file.rows != spec.total_tokens() || file.width != width) {
    return absl::FailedPreconditionError(
        absl::StrCat("context '", path.shown(), "' holds ", file.rows, " x ", file.width,
                     " tokens, not the job's ", spec.total_tokens(), " x ", width,
                     " (changed since the job was accepted?)"));
  }
  Tensor rows =
      huge_pages ? HugePageTensor({spec.tokens(), width}) : Tensor({spec.tokens(), width});
  LACT_RETURN_IF_ERROR(ReadTokenRows(file, spec.begin(), spec.tokens(), rows.ptr()));
  *bytes = spec.tokens() * width * WireBytes(file.dtype);
  return rows;
}

// The shard's rows of the output file, open for them to be written as the
// last block makes them.
absl::StatusOr<std::unique_ptr<OutputFileStream>> OpenOutputRows(const std::string& data_root,
                                                                 const v1::ShardSpec& spec,
                                                                 int64_t width) {
  LACT_ASSIGN_OR_RETURN(const DataPath path, ResolveDataPath(data_root, spec.output_ref().path()));
  return OutputFileStream::Open(path, spec.total_tokens(), width, spec.begin(), spec.tokens());
}

// The coordinator's spool file for the shard's in-band context rows, open
// for writing; nullopt (the job cannot run again from a spool, it still
// runs) when the worker has no --spool-dir or the file is not usable.
std::optional<TokenFileWriter> OpenSpool(const std::string& spool_dir, const v1::ShardSpec& spec,
                                         int64_t width, WireType dtype) {
  if (spec.spool_path().empty() || spec.has_context_ref()) return std::nullopt;
  absl::StatusOr<TokenFileWriter> spool =
      spool_dir.empty() ? absl::FailedPreconditionError("this worker has no --spool-dir")
                        : [&]() -> absl::StatusOr<TokenFileWriter> {
    LACT_ASSIGN_OR_RETURN(const DataPath path, ResolveDataPath(spool_dir, spec.spool_path()));
    return TokenFileWriter::Open(path, spec.total_tokens(), width, dtype);
  }();
  if (!spool.ok()) {
    Log(LogLevel::kWarn, "shard_not_spooled",
        {{"job", spec.job_id()}, {"rank", spec.rank()}, {"reason", spool.status().message()}});
    return std::nullopt;
  }
  return *std::move(spool);
}

// The transfer a shard's client stream will meet, if the job has one.
absl::StatusOr<std::shared_ptr<ShardTransfer>> MakeTransfer(const v1::ShardSpec& spec,
                                                            int64_t width,
                                                            const std::string& spool_dir,
                                                            bool huge_pages) {
  if (!spec.transfer()) return std::shared_ptr<ShardTransfer>();
  LACT_ASSIGN_OR_RETURN(WireType dtype, FromProto(spec.dtype()));
  std::vector<int64_t> lengths = {spec.has_context_ref() ? 0 : spec.tokens()};
  lengths.insert(lengths.end(), spec.query_tokens().begin(), spec.query_tokens().end());
  auto transfer = std::make_shared<ShardTransfer>(
      spec.ticket(), TokenReceiver(std::move(lengths), width, dtype, spec.begin(), huge_pages));
  if (std::optional<TokenFileWriter> spool = OpenSpool(spool_dir, spec, width, dtype)) {
    transfer->SetSpool(std::make_unique<ContextSpool>(*std::move(spool), spec.begin()));
  }
  return transfer;
}

// One RunShard call from its spec to its ShardDone.
class ShardJob {
 public:
  // `cancelled` turns true when the coordinator ends the call.
  ShardJob(const WorkerContext& w, const v1::ShardSpec& spec, JobModel job, ShardCall& call,
           const std::atomic<bool>& cancelled, std::shared_ptr<ShardTransfer> transfer)
      : w_(w),
        spec_(spec),
        job_(std::move(job)),
        call_(call),
        cancelled_flag_(cancelled),
        transfer_(std::move(transfer)) {}

  absl::StatusOr<v1::ShardDone> Run() {
    const auto start = Clock::now();
    LACT_ASSIGN_OR_RETURN(Tensor shard, ObtainContext());
    done_.set_upload_seconds(SecondsSince(start));
    if (spec_.has_output_ref()) {
      LACT_ASSIGN_OR_RETURN(output_file_,
                            OpenOutputRows(w_.data_root, spec_, job_.config.output_width()));
    }
    // Layer progress is the context's: the query sets run through the
    // same hooks afterwards. The context's output rows leave as the last
    // block makes them.
    RunHooks hooks{[this](int layers, int) {
                     ReportSpooled();
                     if (spec_.rank() != 0 || context_done_) return;
                     v1::ShardResponse r;
                     r.set_layers_done(layers);
                     call_.Write(r);
                   },
                   cancelled_,
                   [this](int64_t first, Tensor rows) { return TakeOutputRows(first, rows); }};
    LACT_ASSIGN_OR_RETURN(std::unique_ptr<ShardRunner> runner,
                          MakeShardRunner(w_.backend, job_.model, job_.config, std::move(hooks)));
    const std::chrono::milliseconds timeout(spec_.collective_timeout_ms() > 0
                                                ? spec_.collective_timeout_ms()
                                                : kDefaultCollectiveTimeout.count());
    KvStoreClient store(w_.control, timeout);
    LACT_RETURN_IF_ERROR(runner->JoinGroup(
        {&store, spec_.rendezvous_prefix(), spec_.rank(), spec_.world_size(), timeout}));
    const auto compute_start = Clock::now();
    FusedState state;
    LACT_ASSIGN_OR_RETURN(Tensor output, runner->RunContextShard(std::move(shard), spec_.begin(),
                                                                 spec_.total_tokens(), &state));
    if (output.size() != 0) return absl::InternalError("the shard's outputs were not streamed");
    done_.set_compute_seconds(SecondsSince(compute_start));
    context_done_ = true;
    done_.set_allreduce_seconds(runner->overlap().allreduce_seconds);
    done_.set_allreduce_waited_seconds(runner->overlap().waited_seconds);
    ReportSpooled();
    const auto download_start = Clock::now();
    LACT_RETURN_IF_ERROR(Deliver(*runner, std::move(state)));
    done_.set_download_seconds(SecondsSince(download_start));
    done_.set_peak_rss_bytes(PeakRssBytes());
    return done_;
  }

 private:
  absl::StatusOr<Tensor> ObtainContext() {
    const int64_t width = job_.config.input_width();
    Tensor shard;
    if (spec_.has_context_ref()) {
      int64_t bytes = 0;
      LACT_ASSIGN_OR_RETURN(
          shard, ReadContextRows(spec_.context_from_spool() ? w_.spool_dir : w_.data_root, spec_,
                                 width, w_.huge_pages, &bytes));
      done_.set_context_bytes(bytes);
    }
    if (transfer_ != nullptr && ShardTakesTokensInBand(spec_.has_context_ref(), spec_.rank(),
                                                       spec_.query_tokens_size() > 0)) {
      LACT_RETURN_IF_ERROR(transfer_->AwaitUpload(IdleTimeout()));
      if (!spec_.has_context_ref()) {
        shard = transfer_->receiver().TakeSet(0);
        done_.set_context_bytes(transfer_->context_bytes());
        ReportSpooled();
      }
    }
    return shard;
  }

  // The context's output rows [first, ...) of the shard, from the run's
  // thread: to the output file's writer, or published to the stream (and
  // kept, so a client that goes away can fetch them).
  absl::Status TakeOutputRows(int64_t first, Tensor& rows) {
    output_bytes_ += rows.size() * static_cast<int64_t>(sizeof(float));
    if (output_file_ != nullptr) return output_file_->Put(std::move(rows));
    Keep({0, spec_.begin() + first, "", std::make_shared<const Tensor>(std::move(rows))});
    return absl::OkStatus();
  }

  void Keep(ResultItem item) {
    kept_.outputs.push_back(item);
    if (transfer_ != nullptr) transfer_->Publish(std::move(item));
  }

  // The rest of the results, after the context's outputs (in the output
  // file, or already published): on rank 0 the query sets and the fused
  // state. Everything sent in band is retained first, so a client that
  // goes away can fetch it: its shard still succeeds, with
  // ShardDone.results_delivered false. Returns once all of it is delivered.
  absl::Status Deliver(ShardRunner& runner, FusedState state) {
    done_.set_output_bytes(output_bytes_);
    if (output_file_ != nullptr) LACT_RETURN_IF_ERROR(output_file_->Finish());
    if (spec_.rank() == 0) {
      kept_.state = std::make_shared<const FusedState>(std::move(state));
      for (int k = 0; k < spec_.query_tokens_size(); ++k) {
        LACT_ASSIGN_OR_RETURN(Tensor out,
                              runner.RunQuery(transfer_->receiver().TakeSet(k + 1), *kept_.state));
        Keep({k + 1, 0, "", std::make_shared<const Tensor>(std::move(out))});
      }
      if (spec_.return_state()) {
        for (ResultItem& item : StateItems(kept_.state)) transfer_->Publish(std::move(item));
      }
    }
    const std::chrono::seconds ttl(spec_.retain_seconds() > 0 ? spec_.retain_seconds() : 3600);
    if (kept_.state != nullptr || !kept_.outputs.empty()) {
      // Too large for the cap: the job still succeeds; FetchResult and Query
      // will say why nothing was kept_.
      w_.results->Put(spec_.job_id(), std::move(kept_), ttl).IgnoreError();
    }
    done_.set_results_delivered(true);
    if (transfer_ == nullptr) return absl::OkStatus();
    transfer_->EndPublishing();
    absl::Status sent = transfer_->AwaitDownload(IdleTimeout());
    if (cancelled_())
      return sent.ok() ? absl::CancelledError("cancelled by the coordinator") : sent;
    done_.set_results_delivered(sent.ok());
    if (sent.ok()) w_.results->Delivered(spec_.job_id(), kDeliveredGrace);
    return absl::OkStatus();
  }

  // Tells the coordinator, once, that the shard's context rows are all in
  // the spool (the spool's thread writes them while the shard computes;
  // checked after the upload and at every layer).
  void ReportSpooled() {
    if (spool_reported_ || transfer_ == nullptr || !transfer_->spooled()) return;
    spool_reported_ = true;
    v1::ShardResponse r;
    r.set_spooled(true);
    call_.Write(r);
  }

  // Longest wait for the client's stream and between its chunks.
  std::chrono::milliseconds IdleTimeout() const {
    return std::chrono::milliseconds(spec_.upload_idle_timeout_ms() > 0
                                         ? spec_.upload_idle_timeout_ms()
                                         : kDefaultUploadIdleTimeout.count());
  }

  const WorkerContext& w_;
  const v1::ShardSpec& spec_;
  JobModel job_;
  ShardCall& call_;
  const std::atomic<bool>& cancelled_flag_;
  std::shared_ptr<ShardTransfer> transfer_;
  const std::function<bool()> cancelled_ = [this] { return cancelled_flag_.load(); };
  v1::ShardDone done_;
  RetainedResult kept_{spec_.tenant(),
                       spec_.model(),
                       spec_.options(),
                       spec_.fetch_ticket(),
                       spec_.rank(),
                       nullptr,
                       {}};
  std::unique_ptr<OutputFileStream> output_file_;  // by reference
  int64_t output_bytes_ = 0;
  bool spool_reported_ = false;
  bool context_done_ = false;  // its layers ran; what runs now is query sets
};

absl::Status CheckShardSpec(const v1::ShardSpec& spec) {
  if (spec.tokens() < 1 || spec.begin() < 0 || spec.begin() + spec.tokens() > spec.total_tokens()) {
    return absl::InvalidArgumentError("shard needs 1..total_tokens tokens inside the context");
  }
  if (spec.token_width() < 1)
    return absl::InvalidArgumentError("ShardSpec.token_width must be >= 1");
  const bool needs_stream =
      ShardHasBytesInBand(spec.has_context_ref(), spec.has_output_ref(), spec.rank(),
                          spec.query_tokens_size() > 0, spec.return_state());
  if (needs_stream != spec.transfer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardSpec.transfer is ", spec.transfer(), " but the shard ",
                     needs_stream ? "has" : "has no", " bytes in band"));
  }
  return absl::OkStatus();
}

constexpr char kNoShardSpec[] = "the first RunShard message must be a ShardSpec";

// `*stats`: the shard's ShardDone, when it succeeds.
grpc::Status RunShardFlow(const WorkerContext& w, const v1::ShardRequest& first, ShardCall& call,
                          v1::ShardDone* stats) {
  if (!first.has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kNoShardSpec);
  const v1::ShardSpec& spec = first.spec();
  if (absl::Status s = CheckShardSpec(spec); !s.ok()) return ToGrpcStatus(s);
  // The transfer is met first: loading the model can take longer than a
  // client waits for its stream to be taken.
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer =
      MakeTransfer(spec, spec.token_width(), w.spool_dir, w.huge_pages);
  if (!transfer.ok()) return ToGrpcStatus(transfer.status());
  if (*transfer != nullptr) w.transfers->Register(spec.job_id(), spec.rank(), *transfer);
  std::atomic<bool> cancelled{false};
  ShardCall::EndWatch watch(&call, [&] {
    cancelled = true;
    if (*transfer != nullptr) (*transfer)->Cancel();
  });
  absl::StatusOr<v1::ShardDone> done = [&]() -> absl::StatusOr<v1::ShardDone> {
    LACT_ASSIGN_OR_RETURN(JobModel job, ResolveJobModel(*w.models, spec.model(), spec.options()));
    if (job.config.input_width() != spec.token_width()) {
      return absl::InvalidArgumentError(absl::StrCat("ShardSpec.token_width ", spec.token_width(),
                                                     " but model '", spec.model(), "' takes ",
                                                     job.config.input_width()));
    }
    return ShardJob(w, spec, std::move(job), call, cancelled, *transfer).Run();
  }();
  if (!done.ok()) {
    w.results->Forget(spec.job_id(), spec.fetch_ticket()).IgnoreError();  // of no use now
    w.results->NotKept(spec.job_id(), absl::StrCat("not kept: its shard here ended ",
                                                   absl::StatusCodeToString(done.status().code()),
                                                   ": ", done.status().message().substr(0, 200)));
  }
  if (*transfer != nullptr) {
    if (!done.ok()) (*transfer)->Abort(done.status());
    w.transfers->Unregister(spec.job_id(), spec.rank(), transfer->get());
    // A failure the client's stream caused (a bad chunk, a disconnect) is
    // the transfer's; report that rather than what it led to here.
    absl::Status cause = (*transfer)->failure();
    if (!done.ok() && !cause.ok()) done = cause;
  }
  if (!done.ok()) return ToGrpcStatus(done.status());
  *stats = *done;
  v1::ShardResponse response;
  *response.mutable_done() = *done;
  call.Write(response);
  return grpc::Status::OK;
}

constexpr char kNoQueryHeader[] = "the first RunQuery message must be a header";

grpc::Status RunQueryFlow(const WorkerContext& w, const v1::WorkerQueryRequest& first,
                          QueryCall& call) {
  if (!first.has_header()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kNoQueryHeader);
  const v1::WorkerQueryHeader& header = first.header();
  absl::StatusOr<RetainedResult> kept = w.results->Get(header.job_id());
  if (!kept.ok()) return ToGrpcStatus(kept.status());
  if (kept->state == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("this worker ran rank ", kept->rank, " of job '",
                                     header.job_id(), "'; its fused state is on rank 0's worker"));
  }
  absl::StatusOr<JobModel> job = ResolveJobModel(*w.models, kept->model, kept->options);
  if (!job.ok()) return ToGrpcStatus(job.status());
  absl::StatusOr<WireType> dtype = FromProto(header.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  std::vector<int64_t> lengths = {0};
  lengths.insert(lengths.end(), header.query_tokens().begin(), header.query_tokens().end());
  TokenReceiver receiver(std::move(lengths), job->config.input_width(), *dtype, 0);
  v1::WorkerQueryRequest request;
  while (call.Read(&request)) {
    absl::Status s =
        request.has_chunk()
            ? receiver.Accept(request.chunk())
            : absl::InvalidArgumentError("after the header, RunQuery takes only chunks");
    if (!s.ok()) return ToGrpcStatus(s);
  }
  if (call.EndedAfterReads(!receiver.CheckComplete().ok()))
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled during the upload");
  if (absl::Status s = receiver.CheckComplete(); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<std::unique_ptr<ShardRunner>> runner = MakeShardRunner(
      w.backend, job->model, job->config, {nullptr, [&call] { return call.ended(); }});
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  for (int k = 0; k < header.query_tokens_size(); ++k) {
    absl::StatusOr<Tensor> out = (*runner)->RunQuery(receiver.TakeSet(k + 1), *kept->state);
    if (!out.ok()) return ToGrpcStatus(out.status());
    const int64_t width = out->dim(1);
    const bool sent = SendInMessages(out->dim(0), 4 * width, [&](int64_t r0, int64_t n) {
      v1::ShardResponse r;
      v1::TokenChunk* c = r.mutable_output();
      c->set_set(k + 1);
      c->set_offset(r0);
      c->set_data(reinterpret_cast<const char*>(out->ptr() + r0 * width), n * width * 4);
      return call.Write(r);
    });
    if (!sent) return grpc::Status(grpc::StatusCode::CANCELLED, "the coordinator went away");
  }
  v1::ShardResponse done;
  done.mutable_done()->set_peak_rss_bytes(PeakRssBytes());
  call.Write(done);
  return grpc::Status::OK;
}

// One line per shard: its job, rank, outcome and times.
void LogShardEnd(const v1::ShardRequest& first, const grpc::Status& status,
                 const v1::ShardDone& done) {
  Log(status.ok() ? LogLevel::kInfo : LogLevel::kWarn, "shard_ended",
      {{"job", first.spec().job_id()},
       {"rank", first.spec().rank()},
       {"tokens", first.spec().tokens()},
       {"code", GrpcCodeName(status.error_code())},
       {"message", status.error_message()},
       {"upload_seconds", done.upload_seconds()},
       {"compute_seconds", done.compute_seconds()},
       {"download_seconds", done.download_seconds()}});
}

}  // namespace

grpc::ServerBidiReactor<v1::ShardRequest, v1::ShardResponse>* WorkerService::RunShard(
    grpc::CallbackServerContext* context) {
  context->AddTrailingMetadata(kWorkerStatusKey, "1");
  return ShardCall::Start(
      context, kNoShardSpec,
      [this, context](const v1::ShardRequest& first, ShardCall& call) {
        if (absl::Status s = CheckCoordinator(*context); !s.ok()) return ToGrpcStatus(s);
        if (absl::Status s = Enter(); !s.ok()) return ToGrpcStatus(s);
        if (w_.metrics != nullptr) w_.metrics->ShardStarted();
        v1::ShardDone done;
        grpc::Status status = RunShardFlow(w_, first, call, &done);
        if (w_.metrics != nullptr)
          w_.metrics->ShardEnded(status.error_code(), status.ok() ? &done : nullptr);
        LogShardEnd(first, status, done);
        Leave();
        return status;
      },
      &first_message_);
}

grpc::ServerBidiReactor<v1::WorkerQueryRequest, v1::ShardResponse>* WorkerService::RunQuery(
    grpc::CallbackServerContext* context) {
  return QueryCall::Start(
      context, kNoQueryHeader,
      [this, context](const v1::WorkerQueryRequest& first, QueryCall& call) {
        if (absl::Status s = CheckCoordinator(*context); !s.ok()) return ToGrpcStatus(s);
        if (absl::Status s = Enter(); !s.ok()) return ToGrpcStatus(s);
        grpc::Status status = RunQueryFlow(w_, first, call);
        if (w_.metrics != nullptr) w_.metrics->QueryEnded(status.error_code());
        Leave();
        return status;
      },
      &first_message_);
}

grpc::ServerUnaryReactor* WorkerService::Forget(grpc::CallbackServerContext* context,
                                                const v1::ForgetRequest* request,
                                                v1::ForgetResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status s = CheckCoordinator(*context); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  absl::StatusOr<bool> forgotten = w_.results->Forget(request->job_id(), request->fetch_ticket());
  if (forgotten.ok()) response->set_had_results(*forgotten);
  reactor->Finish(ToGrpcStatus(forgotten.status()));
  return reactor;
}

absl::Status WorkerService::CheckCoordinator(const grpc::ServerContextBase& context) const {
  return CheckSecret(context, w_.cluster_secret, "the cluster secret (--cluster-secret-file)");
}

void WorkerService::Drain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool WorkerService::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

absl::Status WorkerService::Enter() {
  absl::MutexLock lock(&mu_);
  if (draining_) {
    return absl::UnavailableError("this worker is draining (it got SIGTERM); it takes no new work");
  }
  ++running_;
  return absl::OkStatus();
}

void WorkerService::Leave() {
  absl::MutexLock lock(&mu_);
  --running_;
}

}  // namespace lact
