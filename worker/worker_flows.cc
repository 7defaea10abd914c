#include "worker/worker_flows.h"

#include <atomic>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/in_band.h"
#include "proto/job_options.h"
#include "worker/kv_store_client.h"
#include "worker/query_run.h"
#include "worker/shard_run.h"

namespace lact {
namespace {

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

// The transfer a query's client stream meets: no context rows (set 0 is
// empty), then the header's query sets in its dtype and width.
absl::StatusOr<std::shared_ptr<ShardTransfer>> MakeQueryTransfer(
    const v1::WorkerQueryHeader& header, bool huge_pages) {
  if (header.query_tokens().empty())
    return absl::InvalidArgumentError("WorkerQueryHeader has no query sets");
  for (int64_t tokens : header.query_tokens()) {
    if (tokens < 1) return absl::InvalidArgumentError("every query set needs >= 1 token");
  }
  if (header.token_width() < 1)
    return absl::InvalidArgumentError("WorkerQueryHeader.token_width must be >= 1");
  if (header.ticket().empty())
    return absl::InvalidArgumentError("WorkerQueryHeader.ticket must be set");
  LACT_ASSIGN_OR_RETURN(WireType dtype, FromProto(header.dtype()));
  std::vector<int64_t> lengths = {0};
  lengths.insert(lengths.end(), header.query_tokens().begin(), header.query_tokens().end());
  return std::make_shared<ShardTransfer>(
      header.ticket(),
      TokenReceiver(std::move(lengths), header.token_width(), dtype, 0, huge_pages));
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
  CallReports(RunShardCall* call, BoardShard* shard) : call_(call), shard_(shard) {}
  void LayersDone(int layers) override {
    shard_->LayersDone(layers);
    call_->Write(LayersMessage(layers));
  }
  void Spooled() override {
    shard_->Spooled();
    call_->Write(SpooledMessage());
  }

 private:
  RunShardCall* const call_;
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

// Ends a run's transfer (none when null): aborted with the run's failure,
// off the board. A failure the client's stream caused (a bad chunk, a
// disconnect) is the transfer's, and is what the run reports.
absl::StatusOr<v1::ShardDone> EndTransfer(TransferBoard* transfers, const std::string& job_id,
                                          int rank, ShardTransfer* transfer,
                                          absl::StatusOr<v1::ShardDone> done) {
  if (transfer == nullptr) return done;
  if (!done.ok()) transfer->Abort(done.status());
  transfers->Unregister(job_id, rank, transfer);
  const absl::Status cause = transfer->failure();
  if (!done.ok() && !cause.ok()) return cause;
  return done;
}

// The run's ShardDone as its call's last message, and in `*stats`.
template <typename Response>
absl::Status ReplyDone(WriteCall<Response>& call, const absl::StatusOr<v1::ShardDone>& done,
                       v1::ShardDone* stats) {
  if (!done.ok()) return done.status();
  *stats = *done;
  Response response;
  *response.mutable_done() = *done;
  call.Write(response);
  return absl::OkStatus();
}

constexpr char kNoShardSpec[] = "RunShardRequest.spec is missing";

// The shard's run, from the model to its delivery; `transfer` null when
// nothing moves in band.
absl::Status RunShardOnBoard(const WorkerContext& w, const v1::ShardSpec& spec, RunShardCall& call,
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
  done = EndTransfer(w.transfers, spec.job_id(), spec.rank(), transfer.get(), std::move(done));
  shard->End(done);
  // Delivered on the call that still follows; else held for the next.
  if (!call.ended()) shard->Delivered();
  return ReplyDone(call, done, stats);
}

constexpr char kNoQueryHeader[] = "RunQueryRequest.header is missing";

}  // namespace

absl::Status RunShardFlow(const WorkerContext& w, const v1::RunShardRequest& request,
                          RunShardCall& call, v1::ShardDone* stats) {
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
  RunShardCall::EndWatch watch(&call, [&] {
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

absl::Status AttachShardFlow(const WorkerContext& w, const v1::AttachShardRequest& request,
                             RunShardCall& call) {
  LACT_ASSIGN_OR_RETURN(std::shared_ptr<BoardShard> shard,
                        w.shards->Find({request.job_id(), request.attempt(), request.rank()}));
  if (!shard->Follow()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shard of job ", request.job_id(), " (attempt ", request.attempt(),
                     ", rank ", request.rank(), ") is followed by another call, or was dropped"));
  }
  RunShardCall::EndWatch watch(&call, [&shard] { shard->Wake(); });
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

absl::Status RunQueryFlow(const WorkerContext& w, const v1::RunQueryRequest& request,
                          RunQueryCall& call, v1::ShardDone* stats) {
  if (!request.has_header()) {
    return absl::InvalidArgumentError(kNoQueryHeader);
  }
  const v1::WorkerQueryHeader& header = request.header();
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer = MakeQueryTransfer(header, w.huge_pages);
  if (!transfer.ok()) return transfer.status();
  w.transfers->Register(header.job_id(), 0, *transfer);
  std::atomic<bool> cancelled{false};
  RunQueryCall::EndWatch watch(&call, [&] {
    cancelled = true;
    (*transfer)->Cancel();
  });
  absl::StatusOr<v1::ShardDone> done = QueryRun(
                                           {w.models, w.backend, w.results}, header,
                                           [&cancelled] { return cancelled.load(); }, *transfer)
                                           .Run();
  done = EndTransfer(w.transfers, header.job_id(), 0, transfer->get(), std::move(done));
  return ReplyDone(call, done, stats);
}

}  // namespace lact
