#include "client/job_transfers.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/bulk_messages.h"
#include "proto/bulk_transport.h"
#include "proto/job_options.h"
#include "proto/result_tally.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

using Stream = grpc::ClientReaderWriter<BulkOut, TransferResponseIn>;

// data.proto's field numbers.
constexpr int kRequestChunk = 2;
constexpr int kResponseOutput = 1, kResponseState = 2, kResponseComplete = 3;

// Sends `count` rows of set `set` from row `r` (offsets from 0), their
// bytes `data` kept alive by `owner` (null: they outlive the stream);
// `on_rows` (if set) is told how many rows the message carried.
bool SendChunk(Stream* stream, int set, int64_t r, int64_t count, absl::string_view data,
               std::shared_ptr<const std::string> owner,
               const std::function<void(int64_t)>& on_rows) {
  v1::TokenChunk head;
  head.set_set(set);
  head.set_offset(r);
  if (!stream->Write(BulkOut::Chunk(kRequestChunk, head, data, std::move(owner)))) return false;
  if (on_rows) on_rows(count);
  return true;
}

// Sends rows [begin, begin + n) of `t` as set `set`: float32 rows straight
// from the tensor, other dtypes encoded first.
bool SendRows(Stream* stream, const Tensor& t, int64_t begin, int64_t n, int set, WireType dtype,
              const std::function<void(int64_t)>& on_rows) {
  const int64_t width = t.dim(1);
  return SendInMessages(n, WireBytes(dtype) * width, [&](int64_t r, int64_t count) {
    const float* first = t.ptr() + (begin + r) * width;
    if (dtype == WireType::kF32) {
      return SendChunk(
          stream, set, r, count,
          {reinterpret_cast<const char*>(first), static_cast<size_t>(count * width * 4)}, nullptr,
          on_rows);
    }
    auto encoded = std::make_shared<const std::string>(EncodeFloats(first, count * width, dtype));
    return SendChunk(stream, set, r, count, *encoded, encoded, on_rows);
  });
}

// Sends rows [begin, begin + n) of wire rows as set 0, each message's bytes
// straight from the caller's memory.
bool SendWireRows(Stream* stream, const WireRows& rows, int64_t begin, int64_t n,
                  const std::function<void(int64_t)>& on_rows) {
  const int64_t row_bytes = WireBytes(rows.dtype) * rows.width;
  const char* first = static_cast<const char*>(rows.data) + begin * row_bytes;
  return SendInMessages(n, row_bytes, [&](int64_t r, int64_t count) {
    return SendChunk(stream, 0, r, count,
                     {first + r * row_bytes, static_cast<size_t>(count * row_bytes)}, nullptr,
                     on_rows);
  });
}

// Sends rows [begin, begin + n) of the context `source` makes as set 0, each
// message's rows made as it goes (a buffer a message, freed once sent).
// False when the stream ended or *failed holds why a read failed.
bool SendSourceRows(Stream* stream, const ContextSource& source, int64_t begin, int64_t n,
                    WireType dtype, const std::function<void(int64_t)>& on_rows,
                    absl::Status* failed) {
  const int64_t width = source.width;
  std::vector<float> rows;  // other dtypes: the float32 rows before encoding
  return SendInMessages(n, WireBytes(dtype) * width, [&](int64_t r, int64_t count) {
    auto bytes = std::make_shared<std::string>();
    float* into;
    if (dtype == WireType::kF32) {
      bytes->resize(count * width * sizeof(float));
      into = reinterpret_cast<float*>(bytes->data());
    } else {
      rows.resize(count * width);
      into = rows.data();
    }
    *failed = source.read(begin + r, count, into);
    if (!failed->ok()) return false;
    if (dtype != WireType::kF32) *bytes = EncodeFloats(rows.data(), count * width, dtype);
    return SendChunk(stream, 0, r, count, *bytes, bytes, on_rows);
  });
}

// Copies rows of an output chunk into `rows` ([tokens, width]); rows
// outside it are an error.
absl::Status PlaceRows(const v1::TokenChunk& head, const TransferResponseIn& in, float* rows,
                       int64_t tokens, int64_t width) {
  const int64_t values = in.data_size / 4;
  if (head.offset() < 0 || in.data_size % (4 * width) != 0 ||
      head.offset() * width + values > tokens * width) {
    return absl::InternalError(absl::StrCat("a worker sent output rows outside set ", head.set()));
  }
  char* out = reinterpret_cast<char*>(rows + head.offset() * width);
  for (absl::string_view piece : in.data) {
    std::memcpy(out, piece.data(), piece.size());
    out += piece.size();
  }
  return absl::OkStatus();
}

absl::Status PlaceRows(const v1::TokenChunk& head, const TransferResponseIn& in, Tensor& t) {
  return PlaceRows(head, in, t.ptr(), t.dim(0), t.dim(1));
}

}  // namespace

JobTransfers::JobTransfers(std::shared_ptr<grpc::ChannelCredentials> credentials,
                           const v1::JobAccepted& accepted, const ContextInput* context,
                           const std::vector<Tensor>& queries, const OutputTarget* output,
                           JobResult* result)
    : credentials_(std::move(credentials)),
      accepted_(accepted),
      context_(context),
      queries_(queries),
      output_in_band_(output != nullptr && output->in_band()),
      output_rows_(output != nullptr ? output->rows() : nullptr),
      output_buffer_(output != nullptr ? output->buffer() : nullptr),
      result_(result) {}

JobTransfers::~JobTransfers() {
  Cancel();
  Join().IgnoreError();
}

std::unique_ptr<JobTransfers> JobTransfers::Fetch(
    std::shared_ptr<grpc::ChannelCredentials> credentials, const v1::JobAccepted& accepted,
    bool without_outputs, JobResult* result, const OutputTarget* output) {
  static const std::vector<Tensor> kNoQueries;
  static const OutputTarget kMemory = OutputTarget::Memory();
  const bool outputs = accepted.output_in_band() && !without_outputs;
  auto fetch = std::make_unique<JobTransfers>(
      std::move(credentials), accepted, nullptr, kNoQueries,
      outputs ? (output != nullptr ? output : &kMemory) : nullptr, result);
  fetch->fetch_ = true;
  fetch->without_outputs_ = without_outputs;
  return fetch;
}

void JobTransfers::Start(std::chrono::system_clock::time_point deadline,
                         std::function<void(int64_t)> on_context_sent) {
  on_context_sent_ = std::move(on_context_sent);
  const int ranks = accepted_.shards_size();
  statuses_.assign(ranks, absl::OkStatus());
  row_writers_.resize(ranks);
  next_row_.assign(ranks, -1);
  for (int r = 0; r < ranks; ++r) {
    contexts_.push_back(std::make_unique<grpc::ClientContext>());
    contexts_.back()->set_deadline(deadline);
  }
  if (fetch_) AllocateOutputs();
  for (int r = 0; r < ranks; ++r) {
    // Rank 0 keeps the fused state whether or not it had bytes in band.
    if (!accepted_.shards(r).transfer() && !(fetch_ && r == 0)) continue;
    if (without_outputs_ && r != 0) continue;
    threads_.emplace_back([this, r] {
      statuses_[r] = fetch_ ? FetchShard(r, contexts_[r].get()) : RunShard(r, contexts_[r].get());
    });
  }
}

void JobTransfers::Cancel() {
  for (auto& c : contexts_) c->TryCancel();
}

absl::Status JobTransfers::Join() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for (const absl::Status& s : statuses_) LACT_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status JobTransfers::RunShard(int rank, grpc::ClientContext* ctx) {
  const std::string& address = accepted_.shards(rank).worker();
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(address, credentials_, BulkChannelArguments(), "");
  std::unique_ptr<Stream> stream(
      grpc::internal::ClientReaderWriterFactory<BulkOut, TransferResponseIn>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kShardDataTransfer, grpc::internal::RpcMethod::BIDI_STREAMING),
          ctx));
  absl::Status uploaded = Upload(rank, stream.get());
  if (!uploaded.ok()) {  // the context could not be read: the job cannot run
    ctx->TryCancel();
    stream->Finish().IgnoreError();
    return uploaded;
  }
  std::call_once(allocated_, [this] { AllocateOutputs(); });
  LACT_RETURN_IF_ERROR(Receive(rank, stream.get(), ctx));
  return uploaded;
}

absl::Status JobTransfers::FetchShard(int rank, grpc::ClientContext* ctx) {
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel(accepted_.shards(rank).worker(), credentials_, BulkChannelArguments(), "");
  v1::FetchResultRequest request;
  request.set_job_id(accepted_.job_id());
  request.set_rank(rank);
  request.set_ticket(accepted_.fetch_ticket());
  request.set_without_outputs(without_outputs_);
  std::unique_ptr<grpc::ClientReader<TransferResponseIn>> stream(
      grpc::internal::ClientReaderFactory<TransferResponseIn>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kShardDataFetchResult,
                                    grpc::internal::RpcMethod::SERVER_STREAMING),
          ctx, BulkOut::Whole(request)));
  return Receive(rank, stream.get(), ctx);
}

template <typename Stream>
absl::Status JobTransfers::Receive(int rank, Stream* stream, grpc::ClientContext* ctx) {
  TransferResponseIn response;
  ResultTally tally;
  std::optional<v1::TransferComplete> complete;
  absl::Status placed;
  while (placed.ok() && stream->Read(&response)) {
    if (complete.has_value()) {
      placed = absl::InternalError("a message after the stream's completion message");
    } else if (response.outer_field == kResponseComplete) {
      complete.emplace();
      if (!complete->ParseFromString(response.head)) {
        placed = absl::InternalError("a malformed completion message");
      } else {
        placed = tally.Check(*complete);
      }
    } else {
      tally.Add(response.data);
      placed = Place(rank, response);
    }
    response = TransferResponseIn();
  }
  if (!placed.ok()) ctx->TryCancel();
  const grpc::Status finished = stream->Finish();
  const std::string shard =
      absl::StrCat("shard ", rank, " on worker ", accepted_.shards(rank).worker());
  if (!placed.ok()) {
    return absl::Status(placed.code(), absl::StrCat(shard, ": ", placed.message(),
                                                    "; its results are not complete"));
  }
  // Every result arrived and checked: whatever ended the stream after that
  // (the worker gone before its trailers) took nothing from the client.
  if (complete.has_value()) return absl::OkStatus();
  const std::string missing =
      absl::StrCat("its results stopped after ", tally.messages(), " messages (", tally.bytes(),
                   " bytes) without their completion message, so they are not complete");
  if (finished.ok()) return absl::DataLossError(absl::StrCat(shard, ": ", missing));
  const absl::Status ended = FromGrpcStatus(finished, shard);
  if (tally.messages() == 0) return ended;
  return absl::Status(ended.code(), absl::StrCat(ended.message(), "; ", missing));
}

absl::Status JobTransfers::Upload(int rank, Stream* stream) {
  v1::TransferRequest first;
  first.mutable_ticket()->set_job_id(accepted_.job_id());
  first.mutable_ticket()->set_rank(rank);
  first.mutable_ticket()->set_ticket(accepted_.ticket());
  LACT_ASSIGN_OR_RETURN(WireType dtype, FromProto(accepted_.dtype()));
  bool ok = stream->Write(BulkOut::Whole(first));
  const auto sent_rows = [this](int64_t rows) {
    const int64_t sent = tokens_sent_ += rows;
    if (on_context_sent_) on_context_sent_(sent);
  };
  absl::Status read;
  if (context_ != nullptr) {
    const v1::ShardRange& shard = accepted_.shards(rank);
    read = context_->CheckDtype(dtype);
    if (!read.ok()) return read;
    if (const ContextSource* source = context_->source()) {
      ok = ok &&
           SendSourceRows(stream, *source, shard.begin(), shard.tokens(), dtype, sent_rows, &read);
    } else if (const WireRows* wire = context_->wire()) {
      ok = ok && SendWireRows(stream, *wire, shard.begin(), shard.tokens(), sent_rows);
    } else {
      ok = ok && SendRows(stream, *context_->tensor(), shard.begin(), shard.tokens(), 0, dtype,
                          sent_rows);
    }
  }
  if (!read.ok()) return read;  // the caller ends the call
  if (rank == 0) {
    for (size_t k = 0; k < queries_.size() && ok; ++k) {
      ok = SendRows(stream, queries_[k], 0, queries_[k].dim(0), static_cast<int>(k) + 1, dtype,
                    nullptr);
    }
  }
  stream->WritesDone();
  // A refused write means the worker ended the call; Finish says why.
  return absl::OkStatus();
}

absl::Status JobTransfers::Place(int rank, const TransferResponseIn& response) {
  if (response.outer_field == kResponseOutput) {
    v1::TokenChunk head;
    if (!head.ParseFromString(response.head))
      return absl::InternalError("a worker sent a malformed output chunk");
    if (head.set() == 0 && output_in_band_ && output_rows_ != nullptr)
      return PlaceStreamed(rank, head, response);
    if (head.set() == 0 && output_in_band_ && output_buffer_ != nullptr) {
      return PlaceRows(head, response, output_buffer_, accepted_.context_tokens(),
                       accepted_.output_width());
    }
    if (head.set() == 0 && output_in_band_) return PlaceRows(head, response, result_->output);
    if (rank == 0 && head.set() >= 1 && head.set() <= static_cast<int>(result_->queries.size())) {
      return PlaceRows(head, response, result_->queries[head.set() - 1]);
    }
    return absl::InternalError(
        absl::StrCat("worker of shard ", rank, " sent output for unexpected set ", head.set()));
  }
  v1::Tensor piece;
  if (response.outer_field == kResponseState && rank == 0 && piece.ParseFromString(response.head)) {
    Tensor& t = result_->state[piece.name()];
    if (t.shape.empty())
      t = Tensor(std::vector<int64_t>(piece.shape().begin(), piece.shape().end()));
    const int64_t values = response.data_size / 4;
    if (piece.offset() < 0 || piece.offset() + values > t.size()) {
      return absl::InternalError(
          absl::StrCat("state tensor '", piece.name(), "' piece outside its shape"));
    }
    char* out = reinterpret_cast<char*>(t.ptr() + piece.offset());
    for (absl::string_view p : response.data) {
      std::memcpy(out, p.data(), p.size());
      out += p.size();
    }
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("worker of shard ", rank, " sent an unexpected message"));
}

absl::Status JobTransfers::PlaceStreamed(int rank, const v1::TokenChunk& head,
                                         const TransferResponseIn& response) {
  const v1::ShardRange& shard = accepted_.shards(rank);
  const int64_t row_bytes = accepted_.output_width() * int64_t{4};
  const int64_t end = shard.begin() + shard.tokens();
  if (head.offset() < shard.begin() || response.data_size % row_bytes != 0 ||
      head.offset() + static_cast<int64_t>(response.data_size) / row_bytes > end) {
    return absl::InternalError(
        absl::StrCat("worker of shard ", rank, " sent output rows outside its shard"));
  }
  std::unique_ptr<RangeWriter>& writer = row_writers_[rank];
  if (writer == nullptr || head.offset() != next_row_[rank]) {
    writer.reset();
    LACT_ASSIGN_OR_RETURN(writer, (*output_rows_)(head.offset(), end - head.offset()));
  }
  for (absl::string_view piece : response.data)
    LACT_RETURN_IF_ERROR(writer->Append(piece.data(), piece.size()));
  next_row_[rank] = head.offset() + static_cast<int64_t>(response.data_size) / row_bytes;
  return absl::OkStatus();
}

void JobTransfers::AllocateOutputs() {
  const int64_t width = accepted_.output_width();
  // Anew: a job that runs again sends all its results again.
  if (output_in_band_ && output_rows_ == nullptr && output_buffer_ == nullptr)
    result_->output = Tensor({accepted_.context_tokens(), width});
  result_->queries.clear();
  result_->state.clear();
  for (int64_t tokens : accepted_.query_tokens())
    result_->queries.emplace_back(std::vector<int64_t>{tokens, width});
}

}  // namespace lact
