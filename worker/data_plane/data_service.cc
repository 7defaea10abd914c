#include "worker/data_plane/data_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/wire_limits.h"
#include "lact/v1/data.pb.h"
#include "proto/result_tally.h"
#include "proto/stream_call.h"
#include "proto/write_call.h"
#include "worker/data_plane/test_hooks.h"

namespace lact {
namespace {

// How long a client's stream waits for its shard's RunShard to arrive.
constexpr std::chrono::seconds kRegistrationWait(10);

using TransferCall = StreamCall<TransferRequestIn, BulkOut>;
using FetchCall = WriteCall<BulkOut>;

constexpr char kNoTicket[] = "the first Transfer message must be a TransferTicket";

// data.proto's field numbers.
constexpr int kRequestTicket = 1, kRequestChunk = 2;
constexpr int kResponseOutput = 1, kResponseState = 2;

// A stream's results as they leave: tallied for the completion message
// that ends them (data.proto, TransferComplete), with the faults the test
// hooks ask for (test_hooks.h).
template <typename Call>
class ResultSender {
 public:
  explicit ResultSender(Call* call) : call_(call) {}

  // One output or state message; false if the client went away.
  bool Write(BulkOut message) {
    tally_.Add(message.data);
    const TestHooks& hooks = GetTestHooks();
    if (hooks.corrupt_output && tally_.messages() == 1 && !message.data.empty()) {
      auto changed = std::make_shared<std::string>(message.data);
      (*changed)[0] ^= 1;
      message.data = *changed;
      message.keep_alive = changed;
    }
    if (!call_->Write(message)) return false;
    if (hooks.exit_after_outputs > 0 && tally_.messages() >= hooks.exit_after_outputs) _exit(9);
    return true;
  }
  // The completion message; false if the client went away.
  bool Complete() {
    v1::TransferResponse complete;
    *complete.mutable_complete() = tally_.Complete();
    return call_->Write(BulkOut::Whole(complete));
  }

 private:
  Call* const call_;
  ResultTally tally_;
};

// Sends one item in messages of at most 4 MiB, each a slice of the item's
// tensor; false if the client went away.
template <typename Writer>
bool SendItem(const ResultItem& item, Writer* stream) {
  const Tensor& t = *item.tensor;
  const char* bytes = reinterpret_cast<const char*>(t.ptr());
  if (!item.state_name.empty()) {
    const int64_t per_message = kMaxSendPayloadBytes / 4;
    for (int64_t e = 0; e == 0 || e < t.size(); e += per_message) {
      v1::Tensor head;
      head.set_name(item.state_name);
      for (int64_t d : t.shape) head.add_shape(d);
      head.set_offset(e);
      const int64_t n = std::max<int64_t>(0, std::min(per_message, t.size() - e));
      if (!stream->Write(BulkOut::Chunk(
              kResponseState, head, {bytes + 4 * e, static_cast<size_t>(4 * n)}, item.tensor))) {
        return false;
      }
    }
    return true;
  }
  const int64_t width = t.dim(1);
  bytes += 4 * item.first_row * width;
  return SendInMessages(item.row_count(), 4 * width, [&](int64_t r0, int64_t n) {
    v1::TokenChunk head;
    head.set_set(item.set);
    head.set_offset(item.offset + r0);
    const absl::string_view data(bytes + 4 * r0 * width, static_cast<size_t>(4 * n * width));
    return stream->Write(BulkOut::Chunk(kResponseOutput, head, data, item.tensor));
  });
}

absl::Status Serve(ShardTransfer& transfer, TransferCall& call) {
  TransferRequestIn request;
  while (call.Read(&request)) {
    v1::TokenChunk head;
    if (request.outer_field != kRequestChunk || !head.ParseFromString(request.head)) {
      const absl::Status bad =
          absl::InvalidArgumentError("after the TransferTicket, Transfer takes only token chunks");
      transfer.Fail(bad);
      transfer.DropUpload();
      return bad;
    }
    // The spool, if any, keeps the chunk's slices until it has written them.
    absl::Status s = transfer.Accept(
        head.set(), head.offset(), request.data, request.data_size,
        std::make_shared<const std::vector<grpc::Slice>>(std::move(request.slices)));
    if (!s.ok()) {
      transfer.DropUpload();
      return s;
    }
    request = TransferRequestIn();  // drops this stream's hold on the chunk just decoded
  }
  if (call.EndedAfterReads(!transfer.receiver().CheckComplete().ok())) {
    if (transfer.Release()) {
      return absl::CancelledError(
          "the stream ended before it sent a chunk; the shard waits for another "
          "with the same ticket");
    }
    absl::Status failure = transfer.failure();
    if (failure.ok()) {
      failure = absl::CancelledError("the client went away during the upload");
      transfer.Fail(failure);
    }
    transfer.DropUpload();
    return failure;
  }
  if (absl::Status s = transfer.EndUpload(); !s.ok()) return s;
  ResultSender<TransferCall> sender(&call);
  const absl::Status gone =
      absl::CancelledError("the client went away while its outputs were sent");
  while (true) {
    absl::StatusOr<std::optional<ShardTransfer::Item>> item = transfer.NextItem();
    if (!item.ok()) return item.status();
    if (!item->has_value()) break;
    if (!SendItem(**item, &sender)) {
      transfer.Fail(gone);
      return gone;
    }
  }
  if (!sender.Complete()) {
    transfer.Fail(gone);
    return gone;
  }
  transfer.DownloadDone();
  if (const int64_t hold = GetTestHooks().hold_transfer_end_ms; hold > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(hold));
  }
  return absl::OkStatus();
}

absl::Status TransferFlow(TransferBoard& board, const TransferRequestIn& first,
                          TransferCall& call) {
  const auto arrived = std::chrono::steady_clock::now();  // where the upload's time starts
  v1::TransferTicket ticket;
  if (first.outer_field != kRequestTicket || !ticket.ParseFromString(first.head))
    return absl::InvalidArgumentError(kNoTicket);
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer =
      board.Find(ticket.job_id(), ticket.rank(), ticket.ticket(), kRegistrationWait);
  if (!transfer.ok()) return transfer.status();
  if (absl::Status s = (*transfer)->Attach([&call](const absl::Status& why) { call.EndWith(why); },
                                           kRegistrationWait, arrived);
      !s.ok())
    return s;
  absl::Status status = Serve(**transfer, call);
  (*transfer)->Detach();
  return status;
}

absl::Status FetchFlow(RetainedResults& results, const v1::FetchResultRequest& request,
                       FetchCall& call) {
  absl::StatusOr<RetainedResult> kept = results.Get(request.job_id());
  if (!kept.ok()) return kept.status();
  if (!TicketsEqual(kept->ticket, request.ticket())) {
    return absl::PermissionDeniedError(
        absl::StrCat("wrong ticket for job '", request.job_id(), "'"));
  }
  if (kept->rank != request.rank()) {
    return absl::NotFoundError(absl::StrCat("this worker ran rank ", kept->rank, " of job '",
                                            request.job_id(), "', not rank ", request.rank()));
  }
  if (!kept->outputs_dropped.empty() && !request.without_outputs()) {
    return absl::NotFoundError(absl::StrCat(
        "job '", request.job_id(), "': its context outputs were ", kept->outputs_dropped,
        kept->state != nullptr || !kept->outputs.empty()
            ? "; its query outputs and fused state are still here "
              "(FetchResultRequest.without_outputs)"
            : ""));
  }
  std::vector<ResultItem> items;
  for (const ResultItem& item : kept->outputs) {
    if (item.set != 0 || !request.without_outputs()) items.push_back(item);
  }
  if (kept->state != nullptr) {
    for (ResultItem& item : StateItems(kept->state)) items.push_back(std::move(item));
  }
  ResultSender<FetchCall> sender(&call);
  for (const ResultItem& item : items) {
    if (!SendItem(item, &sender)) return absl::CancelledError("the client went away");
  }
  if (!sender.Complete()) return absl::CancelledError("the client went away");
  return absl::OkStatus();
}

}  // namespace

DataService::DataService(TransferBoard* board, RetainedResults* results, int max_pending_calls,
                         std::chrono::milliseconds first_message_timeout)
    : board_(board), results_(results) {
  first_message_.max_waiting = max_pending_calls;
  first_message_.timeout = first_message_timeout;
  AddMethod(new grpc::internal::RpcServiceMethod(
      kShardDataTransfer, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodCallback(
      0, new grpc::internal::CallbackBidiHandler<TransferRequestIn, BulkOut>(
             [this](grpc::CallbackServerContext* context) { return Transfer(context); }));
  AddMethod(new grpc::internal::RpcServiceMethod(
      kShardDataFetchResult, grpc::internal::RpcMethod::SERVER_STREAMING, nullptr));
  MarkMethodCallback(
      1, new grpc::internal::CallbackServerStreamingHandler<v1::FetchResultRequest, BulkOut>(
             [this](grpc::CallbackServerContext* context, const v1::FetchResultRequest* request) {
               return FetchResult(context, *request);
             }));
}

grpc::ServerBidiReactor<TransferRequestIn, BulkOut>* DataService::Transfer(
    grpc::CallbackServerContext* context) {
  return TransferCall::Start(
      context, kNoTicket,
      [board = board_](const TransferRequestIn& first, TransferCall& call) {
        return TransferFlow(*board, first, call);
      },
      &first_message_);
}

grpc::ServerWriteReactor<BulkOut>* DataService::FetchResult(grpc::CallbackServerContext* context,
                                                            const v1::FetchResultRequest& request) {
  return FetchCall::Start(context, [results = results_, request](FetchCall& call) {
    return FetchFlow(*results, request, call);
  });
}

}  // namespace lact
