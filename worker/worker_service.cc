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
#include "proto/write_call.h"
#include "worker/kv_store_client.h"
#include "worker/query_run.h"
#include "worker/shard_run.h"

namespace lact {
namespace {

using ShardCall = WriteCall<v1::RunShardResponse>;
using QueryCall = WriteCall<v1::RunQueryResponse>;

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
    spool->ExpectInOrder(spec.begin(), spec.tokens());
    transfer->SetSpool(std::make_unique<ContextSpool>(*std::move(spool), spec.begin()));
  }
  return transfer;
}

v1::RunShardResponse LayersMessage(int layers) {
  v1::RunShardResponse r;
  r.set_layers_done(layers);
  return r;
}

v1::RunShardResponse InLineMessage() {
  v1::RunShardResponse r;
  r.set_in_line(true);
  return r;
}

v1::RunShardResponse SpooledMessage() {
  v1::RunShardResponse r;
  r.set_spooled(true);
  return r;
}

// What a shard tells the coordinator, as messages on its RunShard call,
// and to the board, for a coordinator that follows it again.
class CallReports final : public ShardReports {
 public:
  CallReports(ShardCall* call, BoardShard* shard) : call_(call), shard_(shard) {}
  void LayersDone(int layers) override {
    shard_->LayersDone(layers);
    call_->Write(LayersMessage(layers));
  }
  void Spooled() override {
    shard_->Spooled();
    call_->Write(SpooledMessage());
  }

 private:
  ShardCall* const call_;
  BoardShard* const shard_;
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

constexpr char kNoShardSpec[] = "RunShardRequest.spec is missing";

// The shard's run, from the model to its delivery; `transfer` null when
// nothing moves in band.
absl::Status RunShardOnBoard(const WorkerContext& w, const v1::ShardSpec& spec, ShardCall& call,
                             BoardShard* shard, const std::shared_ptr<ShardTransfer>& transfer,
                             ComputeLine::Place* turn, KvStoreClient* store,
                             const std::atomic<bool>& cancelled, v1::ShardDone* stats) {
  absl::StatusOr<v1::ShardDone> done = [&]() -> absl::StatusOr<v1::ShardDone> {
    LACT_ASSIGN_OR_RETURN(JobModel job, ResolveJobModel(*w.models, spec.model(), spec.options()));
    if (job.config.input_width() != spec.token_width()) {
      return absl::InvalidArgumentError(absl::StrCat("ShardSpec.token_width ", spec.token_width(),
                                                     " but model '", spec.model(), "' takes ",
                                                     job.config.input_width()));
    }
    CallReports reports(&call, shard);
    return ShardRun(
               {w.backend, w.data_root, w.spool_dir, w.huge_pages, w.results, store, turn}, spec,
               std::move(job), &reports, [&cancelled] { return cancelled.load(); }, transfer)
        .Run();
  }();
  if (!done.ok()) {
    w.results->Forget(spec.job_id(), spec.fetch_ticket()).IgnoreError();  // of no use now
    w.results->NotKept(spec.job_id(), absl::StrCat("not kept: its shard here ended ",
                                                   absl::StatusCodeToString(done.status().code()),
                                                   ": ", done.status().message().substr(0, 200)));
  }
  if (transfer != nullptr) {
    if (!done.ok()) transfer->Abort(done.status());
    w.transfers->Unregister(spec.job_id(), spec.rank(), transfer.get());
    // A failure the client's stream caused (a bad chunk, a disconnect) is
    // the transfer's; report that rather than what it led to here.
    absl::Status cause = transfer->failure();
    if (!done.ok() && !cause.ok()) done = cause;
  }
  shard->End(done);
  // Delivered on the call that still follows; else held for the next.
  if (!call.ended()) shard->Delivered();
  if (!done.ok()) return done.status();
  *stats = *done;
  v1::RunShardResponse response;
  *response.mutable_done() = *done;
  call.Write(response);
  return absl::OkStatus();
}

// `*stats`: the shard's ShardDone, when it succeeds.
absl::Status RunShardFlow(const WorkerContext& w, const v1::RunShardRequest& request,
                          ShardCall& call, v1::ShardDone* stats) {
  if (!request.has_spec()) return absl::InvalidArgumentError(kNoShardSpec);
  const v1::ShardSpec& spec = request.spec();
  if (absl::Status s = CheckShardSpec(spec); !s.ok()) return s;
  // The transfer is met first: loading the model can take longer than a
  // client waits for its stream to be taken.
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer =
      MakeTransfer(spec, spec.token_width(), w.spool_dir, w.huge_pages);
  if (!transfer.ok()) return transfer.status();
  const std::shared_ptr<ComputeLine::Place> turn = w.line->Join();
  call.Write(InLineMessage());
  if (*transfer != nullptr) {
    (*transfer)->SetPlace(turn);
    w.transfers->Register(spec.job_id(), spec.rank(), *transfer);
  }
  std::atomic<bool> cancelled{false};
  KvStoreClient store(w.control, CollectiveTimeout(spec));
  const std::shared_ptr<BoardShard> shard =
      w.shards->Begin({spec.job_id(), spec.attempt(), spec.rank()}, spec.fetch_ticket());
  shard->SetCancelAction([&] {
    cancelled = true;
    store.Cancel();  // a group still meeting (the shard staged, or just begun) stops now
    turn->Close();
    if (*transfer != nullptr) (*transfer)->Cancel();
  });
  // The call's end stops the shard only on a worker that holds none;
  // otherwise the shard runs on, held, until a coordinator says.
  ShardCall::EndWatch watch(&call, [&] {
    if (w.shards->grace().count() == 0) return shard->Drop();
    shard->Unfollow();
    w.shards->BecameHeld();
  });
  const absl::Status status =
      RunShardOnBoard(w, spec, call, shard.get(), *transfer, turn.get(), &store, cancelled, stats);
  turn->Leave();  // its staged bytes are freed now, whoever still holds its transfer
  shard->SetCancelAction(nullptr);
  w.shards->Finished(shard);
  return status;
}

// Follows a held shard on `call` (AttachShard): its progress from where it
// stands, then its end.
absl::Status AttachShardFlow(const WorkerContext& w, const v1::AttachShardRequest& request,
                             ShardCall& call) {
  LACT_ASSIGN_OR_RETURN(std::shared_ptr<BoardShard> shard,
                        w.shards->Find({request.job_id(), request.attempt(), request.rank()}));
  if (!shard->Follow()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shard of job ", request.job_id(), " (attempt ", request.attempt(),
                     ", rank ", request.rank(), ") is followed by another call, or was dropped"));
  }
  ShardCall::EndWatch watch(&call, [&shard] { shard->Wake(); });
  ShardView seen;
  while (true) {
    const ShardView now = shard->Await(seen);
    if (now.layers_done != seen.layers_done) call.Write(LayersMessage(now.layers_done));
    if (now.spooled && !seen.spooled) call.Write(SpooledMessage());
    seen = now;
    if (call.ended()) {
      shard->Unfollow();
      w.shards->BecameHeld();
      return absl::CancelledError("the coordinator's AttachShard call ended");
    }
    // Not CANCELLED: the coordinator reads that as the client gone.
    if (shard->dropped()) {
      return absl::FailedPreconditionError(
          "this worker dropped the shard while it was followed again");
    }
    if (now.ended) break;
  }
  shard->Delivered();
  w.shards->Remove(shard);
  if (!seen.outcome.ok()) return seen.outcome.status();
  v1::RunShardResponse response;
  *response.mutable_done() = *seen.outcome;
  call.Write(response);
  return absl::OkStatus();
}

constexpr char kNoQueryHeader[] = "RunQueryRequest.header is missing";

// `*stats`: the query's ShardDone, when it succeeds.
absl::Status RunQueryFlow(const WorkerContext& w, const v1::RunQueryRequest& request,
                          QueryCall& call, v1::ShardDone* stats) {
  if (!request.has_header()) {
    return absl::InvalidArgumentError(kNoQueryHeader);
  }
  const v1::WorkerQueryHeader& header = request.header();
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer = MakeQueryTransfer(header, w.huge_pages);
  if (!transfer.ok()) return transfer.status();
  w.transfers->Register(header.job_id(), 0, *transfer);
  std::atomic<bool> cancelled{false};
  QueryCall::EndWatch watch(&call, [&] {
    cancelled = true;
    (*transfer)->Cancel();
  });
  absl::StatusOr<v1::ShardDone> done = QueryRun(
                                           {w.models, w.backend, w.results}, header,
                                           [&cancelled] { return cancelled.load(); }, *transfer)
                                           .Run();
  if (!done.ok()) (*transfer)->Abort(done.status());
  w.transfers->Unregister(header.job_id(), 0, transfer->get());
  // A failure the client's stream caused is the transfer's: report that.
  const absl::Status cause = (*transfer)->failure();
  if (!done.ok() && !cause.ok()) done = cause;
  if (!done.ok()) return done.status();
  *stats = *done;
  v1::RunQueryResponse response;
  *response.mutable_done() = *done;
  call.Write(response);
  return absl::OkStatus();
}

// One line per shard: its job, rank, outcome and times.
void LogShardEnd(const v1::RunShardRequest& request, const absl::Status& status,
                 const v1::ShardDone& done) {
  Log(status.ok() ? LogLevel::kInfo : LogLevel::kWarn, "shard_ended",
      {{"job", request.spec().job_id()},
       {"rank", request.spec().rank()},
       {"tokens", request.spec().tokens()},
       {"code", absl::StatusCodeToString(status.code())},
       {"message", status.message()},
       {"upload_seconds", done.upload_seconds()},
       {"compute_seconds", done.compute_seconds()},
       {"download_seconds", done.download_seconds()}});
}

}  // namespace

WorkerService::WorkerService(WorkerContext context)
    : w_(std::move(context)), queries_(w_.max_queries, "queries", "", "--max-queries") {
  if (w_.shards == nullptr) {
    own_shards_ = std::make_unique<ShardBoard>(
        std::chrono::seconds(0), [results = w_.results](const BoardShard& shard) {
          results->Forget(shard.key().job_id, shard.fetch_ticket()).IgnoreError();
        });
    w_.shards = own_shards_.get();
  }
  if (w_.line == nullptr) {
    own_line_ = std::make_unique<ComputeLine>(0);
    w_.line = own_line_.get();
  }
}

grpc::ServerWriteReactor<v1::RunShardResponse>* WorkerService::AttachShard(
    grpc::CallbackServerContext* context, const v1::AttachShardRequest* request) {
  context->AddTrailingMetadata(kWorkerStatusKey, "1");
  return ShardCall::Start(context, [this, context, request](ShardCall& call) {
    if (absl::Status s = CheckCoordinator(*context); !s.ok()) return s;
    return AttachShardFlow(w_, *request, call);
  });
}

grpc::ServerWriteReactor<v1::RunShardResponse>* WorkerService::RunShard(
    grpc::CallbackServerContext* context, const v1::RunShardRequest* request) {
  context->AddTrailingMetadata(kWorkerStatusKey, "1");
  return ShardCall::Start(context, [this, context, request](ShardCall& call) {
    if (absl::Status s = CheckCoordinator(*context); !s.ok()) return s;
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (w_.metrics != nullptr) w_.metrics->ShardStarted();
    v1::ShardDone done;
    const absl::Status status = RunShardFlow(w_, *request, call, &done);
    if (w_.metrics != nullptr) w_.metrics->ShardEnded(status.code(), status.ok() ? &done : nullptr);
    LogShardEnd(*request, status, done);
    Leave();
    return status;
  });
}

grpc::ServerWriteReactor<v1::RunQueryResponse>* WorkerService::RunQuery(
    grpc::CallbackServerContext* context, const v1::RunQueryRequest* request) {
  return QueryCall::Start(context, [this, context, request](QueryCall& call) {
    if (absl::Status s = CheckCoordinator(*context); !s.ok()) return s;
    if (absl::Status s = queries_.Enter(""); !s.ok()) return s;
    if (absl::Status s = Enter(); !s.ok()) {
      queries_.Leave("");
      return s;
    }
    v1::ShardDone done;
    const absl::Status status = RunQueryFlow(w_, *request, call, &done);
    if (w_.metrics != nullptr) w_.metrics->QueryEnded(status.code());
    Leave();
    queries_.Leave("");
    return status;
  });
}

grpc::ServerUnaryReactor* WorkerService::Forget(grpc::CallbackServerContext* context,
                                                const v1::ForgetRequest* request,
                                                v1::ForgetResponse* response) {
  const absl::Status status = [&]() -> absl::Status {
    LACT_RETURN_IF_ERROR(CheckCoordinator(*context));
    LACT_ASSIGN_OR_RETURN(const bool forgotten,
                          w_.results->Forget(request->job_id(), request->fetch_ticket()));
    response->set_had_results(forgotten);
    return absl::OkStatus();
  }();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
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
