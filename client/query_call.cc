#include "client/query_call.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "proto/status_conversion.h"

namespace lact {

QueryCall::QueryCall(v1::Coordinator::Stub* stub, grpc::ClientContext* ctx,
                     const v1::QuerySpec& spec, const std::vector<Tensor>& queries, WireType dtype)
    : ctx_(ctx), queries_(queries), dtype_(dtype) {
  stub->async()->Query(ctx, this);
  *request_.mutable_spec() = spec;
  StartWrite(&request_);
  StartRead(&response_);
  StartCall();
}

void QueryCall::WriteNext() {
  while (next_set_ < queries_.size() && next_row_ >= queries_[next_set_].dim(0)) {
    ++next_set_;
    next_row_ = 0;
  }
  if (next_set_ == queries_.size()) {
    StartWritesDone();
    return;
  }
  const Tensor& t = queries_[next_set_];
  const int64_t width = t.dim(1);
  const int64_t n = std::min(RowsPerMessage(WireBytes(dtype_) * width), t.dim(0) - next_row_);
  request_.Clear();
  v1::TokenChunk* chunk = request_.mutable_chunk();
  chunk->set_set(static_cast<int>(next_set_) + 1);
  chunk->set_offset(next_row_);
  chunk->set_data(EncodeFloats(t.ptr() + next_row_ * width, n * width, dtype_));
  next_row_ += n;
  StartWrite(&request_);
}

void QueryCall::OnWriteDone(bool ok) {
  if (ok) WriteNext();  // otherwise the call has ended: OnDone says why
}

void QueryCall::OnReadDone(bool ok) {
  if (!ok) return;
  if (response_.has_output()) placed_ = Place(response_.output());
  if (!placed_.ok()) {
    ctx_->TryCancel();
    return;
  }
  StartRead(&response_);
}

void QueryCall::OnDone(const grpc::Status& status) {
  status_ = status;
  done_.Notify();
}

absl::StatusOr<std::vector<Tensor>> QueryCall::Await() {
  done_.WaitForNotification();
  LACT_RETURN_IF_ERROR(placed_);
  LACT_RETURN_IF_ERROR(FromGrpcStatus(status_));
  if (outputs_.size() != queries_.size())
    return absl::InternalError("the server answered the query with no output");
  return std::move(outputs_);
}

absl::Status QueryCall::Place(const v1::OutputChunk& chunk) {
  if (outputs_.empty()) {
    const int64_t width =
        chunk.tokens() > 0 ? static_cast<int64_t>(chunk.data().size()) / 4 / chunk.tokens() : 1;
    for (const Tensor& q : queries_) outputs_.emplace_back(std::vector<int64_t>{q.dim(0), width});
  }
  if (chunk.set() < 1 || chunk.set() > static_cast<int>(outputs_.size())) {
    return absl::InternalError(absl::StrCat("server sent output for unknown set ", chunk.set()));
  }
  Tensor& t = outputs_[chunk.set() - 1];
  const int64_t width = t.dim(1), values = static_cast<int64_t>(chunk.data().size()) / 4;
  if (chunk.offset() < 0 || chunk.offset() * width + values > t.size()) {
    return absl::InternalError(absl::StrCat("server sent output rows outside set ", chunk.set()));
  }
  std::memcpy(t.ptr() + chunk.offset() * width, chunk.data().data(), values * 4);
  return absl::OkStatus();
}

}  // namespace lact
