#include "client/shard_transfers.h"

#include <grpcpp/grpcpp.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

using Stream = grpc::ClientReaderWriter<v1::TransferRequest, v1::TransferResponse>;

// Sends rows [begin, begin + n) of `t` as set `set` (offsets from 0).
bool SendRows(Stream* stream, const Tensor& t, int64_t begin, int64_t n, int set, WireType dtype,
              std::atomic<int64_t>* sent) {
  const int64_t width = t.dim(1), rows = RowsPerMessage(WireBytes(dtype) * width);
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t count = std::min(rows, n - r);
    v1::TransferRequest request;
    request.mutable_chunk()->set_set(set);
    request.mutable_chunk()->set_offset(r);
    request.mutable_chunk()->set_data(EncodeTokens(t.ptr() + (begin + r) * width, count * width, dtype));
    if (!stream->Write(request)) return false;
    if (sent != nullptr) *sent += count;
  }
  return true;
}

// Copies rows of an output chunk into `t`; rows outside it are an error.
absl::Status PlaceRows(const v1::TokenChunk& chunk, Tensor& t) {
  const int64_t width = t.dim(1), values = static_cast<int64_t>(chunk.data().size()) / 4;
  if (chunk.offset() < 0 || values % width != 0 || chunk.offset() * width + values > t.size()) {
    return absl::InternalError(absl::StrCat("a worker sent output rows outside set ", chunk.set()));
  }
  std::memcpy(t.ptr() + chunk.offset() * width, chunk.data().data(), values * 4);
  return absl::OkStatus();
}

}  // namespace

ShardTransfers::ShardTransfers(const v1::JobAccepted& accepted, const Tensor* context,
                               const std::vector<Tensor>& queries, bool output_in_band, JobResult* result)
    : accepted_(accepted), context_(context), queries_(queries), output_in_band_(output_in_band), result_(result) {}

ShardTransfers::~ShardTransfers() {
  Cancel();
  Join().IgnoreError();
}

void ShardTransfers::Start() {
  const int ranks = accepted_.shards_size();
  statuses_.assign(ranks, absl::OkStatus());
  for (int r = 0; r < ranks; ++r) contexts_.push_back(std::make_unique<grpc::ClientContext>());
  for (int r = 0; r < ranks; ++r) {
    if (!accepted_.shards(r).transfer()) continue;
    threads_.emplace_back([this, r] { statuses_[r] = RunShard(r, contexts_[r].get()); });
  }
}

void ShardTransfers::Cancel() {
  for (auto& c : contexts_) c->TryCancel();
}

absl::Status ShardTransfers::Join() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (const absl::Status& s : statuses_) LACT_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status ShardTransfers::RunShard(int rank, grpc::ClientContext* ctx) {
  const std::string& address = accepted_.shards(rank).worker();
  auto stub = v1::ShardData::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::unique_ptr<Stream> stream = stub->Transfer(ctx);
  absl::Status uploaded = Upload(rank, stream.get());
  std::call_once(allocated_, [this] { AllocateOutputs(); });
  v1::TransferResponse response;
  absl::Status placed;
  while (placed.ok() && stream->Read(&response)) placed = Place(rank, response);
  if (!placed.ok()) ctx->TryCancel();
  grpc::Status finished = stream->Finish();
  LACT_RETURN_IF_ERROR(placed);
  if (!finished.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(finished.error_code()),
                        absl::StrCat("shard ", rank, " on worker ", address, ": ", finished.error_message()));
  }
  return uploaded;
}

absl::Status ShardTransfers::Upload(int rank, Stream* stream) {
  v1::TransferRequest first;
  first.mutable_ticket()->set_job_id(accepted_.job_id());
  first.mutable_ticket()->set_rank(rank);
  first.mutable_ticket()->set_ticket(accepted_.ticket());
  LACT_ASSIGN_OR_RETURN(WireType dtype, FromProto(accepted_.dtype()));
  bool ok = stream->Write(first);
  if (context_ != nullptr) {
    const v1::ShardRange& shard = accepted_.shards(rank);
    ok = ok && SendRows(stream, *context_, shard.begin(), shard.tokens(), 0, dtype, &tokens_sent_);
  }
  if (rank == 0) {
    for (size_t k = 0; k < queries_.size() && ok; ++k) {
      ok = SendRows(stream, queries_[k], 0, queries_[k].dim(0), static_cast<int>(k) + 1, dtype, nullptr);
    }
  }
  stream->WritesDone();
  // A refused write means the worker ended the call; Finish says why.
  return absl::OkStatus();
}

absl::Status ShardTransfers::Place(int rank, v1::TransferResponse& response) {
  if (response.has_output()) {
    const v1::TokenChunk& chunk = response.output();
    if (chunk.set() == 0 && output_in_band_) return PlaceRows(chunk, result_->output);
    if (rank == 0 && chunk.set() >= 1 && chunk.set() <= static_cast<int>(result_->queries.size())) {
      return PlaceRows(chunk, result_->queries[chunk.set() - 1]);
    }
    return absl::InternalError(absl::StrCat("worker of shard ", rank, " sent output for unexpected set ", chunk.set()));
  }
  if (response.has_state() && rank == 0) {
    v1::Tensor& piece = *response.mutable_state();
    Tensor& t = result_->state[piece.name()];
    if (t.shape.empty()) t = Tensor(std::vector<int64_t>(piece.shape().begin(), piece.shape().end()));
    const int64_t values = static_cast<int64_t>(piece.data().size()) / 4;
    if (piece.offset() < 0 || piece.offset() + values > t.size()) {
      return absl::InternalError(absl::StrCat("state tensor '", piece.name(), "' piece outside its shape"));
    }
    std::memcpy(t.ptr() + piece.offset(), piece.data().data(), values * 4);
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("worker of shard ", rank, " sent an unexpected message"));
}

void ShardTransfers::AllocateOutputs() {
  const int64_t width = accepted_.output_width();
  if (output_in_band_) result_->output = Tensor({accepted_.context_tokens(), width});
  for (const Tensor& q : queries_) result_->queries.emplace_back(std::vector<int64_t>{q.dim(0), width});
}

}  // namespace lact
