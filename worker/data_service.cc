#include "worker/data_service.h"

#include <algorithm>

#include "common/wire_limits.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

// How long a client's stream waits for its shard's RunShard to arrive.
constexpr std::chrono::seconds kRegistrationWait(10);

using Stream = grpc::ServerReaderWriter<v1::TransferResponse, v1::TransferRequest>;

// Sends one item in messages of at most 4 MiB; false if the client went away.
bool SendItem(const ShardTransfer::Item& item, Stream* stream) {
  const Tensor& t = *item.tensor;
  if (!item.state_name.empty()) {
    const int64_t per_message = kMaxSendPayloadBytes / 4;
    for (int64_t e = 0; e < std::max<int64_t>(t.size(), 1); e += per_message) {
      v1::TransferResponse r;
      v1::Tensor* out = r.mutable_state();
      out->set_name(item.state_name);
      for (int64_t d : t.shape) out->add_shape(d);
      out->set_offset(e);
      const int64_t n = std::min(per_message, t.size() - e);
      out->set_data(reinterpret_cast<const char*>(t.ptr() + e), std::max<int64_t>(n, 0) * 4);
      if (!stream->Write(r)) return false;
    }
    return true;
  }
  const int64_t width = t.dim(1), rows = RowsPerMessage(4 * width);
  for (int64_t r0 = 0; r0 < t.dim(0); r0 += rows) {
    const int64_t n = std::min(rows, t.dim(0) - r0);
    v1::TransferResponse r;
    v1::TokenChunk* c = r.mutable_output();
    c->set_set(item.set);
    c->set_offset(item.offset + r0);
    c->set_data(reinterpret_cast<const char*>(t.ptr() + r0 * width), n * width * 4);
    if (!stream->Write(r)) return false;
  }
  return true;
}

grpc::Status Serve(ShardTransfer& transfer, grpc::ServerContext* context, Stream* stream) {
  v1::TransferRequest request;
  while (stream->Read(&request)) {
    if (!request.has_chunk()) {
      const absl::Status bad = absl::InvalidArgumentError("after the TransferTicket, Transfer takes only token chunks");
      transfer.Fail(bad);
      return ToGrpcStatus(bad);
    }
    absl::Status s = transfer.Accept(request.chunk());
    if (!s.ok()) return ToGrpcStatus(s);
  }
  if (context->IsCancelled()) {
    absl::Status failure = transfer.failure();
    if (failure.ok()) {
      failure = absl::CancelledError("the client went away during the upload");
      transfer.Fail(failure);
    }
    return ToGrpcStatus(failure);
  }
  if (absl::Status s = transfer.EndUpload(); !s.ok()) return ToGrpcStatus(s);
  while (true) {
    absl::StatusOr<std::optional<ShardTransfer::Item>> item = transfer.NextItem();
    if (!item.ok()) return ToGrpcStatus(item.status());
    if (!item->has_value()) break;
    if (!SendItem(**item, stream)) {
      const absl::Status gone = absl::CancelledError("the client went away while its outputs were sent");
      transfer.Fail(gone);
      return ToGrpcStatus(gone);
    }
  }
  transfer.DownloadDone();
  return grpc::Status::OK;
}

}  // namespace

grpc::Status DataService::Transfer(grpc::ServerContext* context, Stream* stream) {
  v1::TransferRequest request;
  if (!stream->Read(&request) || !request.has_ticket()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first Transfer message must be a TransferTicket");
  }
  const v1::TransferTicket& ticket = request.ticket();
  absl::StatusOr<std::shared_ptr<ShardTransfer>> transfer =
      board_->Find(ticket.job_id(), ticket.rank(), ticket.ticket(), kRegistrationWait);
  if (!transfer.ok()) return ToGrpcStatus(transfer.status());
  if (absl::Status s = (*transfer)->Attach([context] { context->TryCancel(); }); !s.ok()) return ToGrpcStatus(s);
  grpc::Status status = Serve(**transfer, context, stream);
  (*transfer)->Detach();
  return status;
}

}  // namespace lact
