#include "tests/raw_job.h"

#include <algorithm>

#include "common/token_codec.h"
#include "common/wire_limits.h"

namespace lact::testing {
namespace {

// Rows [begin, begin + n) of `t` as chunks of set `set`, offsets from 0.
bool SendSet(grpc::ClientReaderWriter<v1::TransferRequest, v1::TransferResponse>* stream,
             const Tensor& t, int64_t begin, int64_t n, int set) {
  const int64_t width = t.dim(1);
  return SendInMessages(n, 4 * width, [&](int64_t r, int64_t count) {
    v1::TransferRequest request;
    request.mutable_chunk()->set_set(set);
    request.mutable_chunk()->set_offset(r);
    request.mutable_chunk()->set_data(
        EncodeFloats(t.ptr() + (begin + r) * width, count * width, WireType::kF32));
    return stream->Write(request);
  });
}

}  // namespace

RawJob::RawJob(const std::string& address, v1::JobSpec spec)
    : stub_(v1::CoordinatorService::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
  ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::SubmitRequest request;
  *request.mutable_spec() = std::move(spec);
  stream_ = stub_->Submit(&ctx_, request);
  v1::SubmitResponse response;
  while (stream_->Read(&response)) {
    if (response.has_accepted()) {
      accepted_ = response.accepted();
      break;
    }
  }
}

grpc::Status RawJob::Finish() {
  v1::SubmitResponse response;
  while (stream_->Read(&response)) {
  }
  return stream_->Finish();
}

bool RawJob::AwaitProgress(v1::Progress::Stage stage) {
  v1::SubmitResponse response;
  while (stream_->Read(&response)) {
    if (response.has_progress() && response.progress().stage() == stage) return true;
  }
  return false;
}

grpc::Status RawJob::Transfer::Close() {
  std::string rows;
  return CloseKeepingOutputs(&rows);
}

grpc::Status RawJob::Transfer::CloseKeepingOutputs(std::string* rows) {
  if (!writes_done) stream->WritesDone();
  writes_done = true;
  v1::TransferResponse response;
  while (stream->Read(&response)) {
    if (response.has_output() && response.output().set() == 0) *rows += response.output().data();
  }
  return stream->Finish();
}

RawJob::Transfer RawJob::Open(int rank, const std::string& ticket) {
  Transfer t;
  t.stub = v1::ShardDataService::NewStub(
      grpc::CreateChannel(accepted_.shards(rank).worker(), grpc::InsecureChannelCredentials()));
  t.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  t.stream = t.stub->Transfer(t.ctx.get());
  v1::TransferRequest first;
  first.mutable_ticket()->set_job_id(accepted_.job_id());
  first.mutable_ticket()->set_rank(rank);
  first.mutable_ticket()->set_ticket(ticket);
  t.stream->Write(first);
  return t;
}

RawJob::Transfer RawJob::Upload(int rank, const Tensor& context, const std::vector<Tensor>& queries,
                                int64_t tokens) {
  Transfer t = Open(rank, accepted_.ticket());
  const v1::ShardRange& shard = accepted_.shards(rank);
  const int64_t n = tokens < 0 ? shard.tokens() : std::min(tokens, shard.tokens());
  bool ok = SendSet(t.stream.get(), context, shard.begin(), n, 0);
  if (n < shard.tokens()) return t;
  for (size_t k = 0; rank == 0 && ok && k < queries.size(); ++k) {
    ok = SendSet(t.stream.get(), queries[k], 0, queries[k].dim(0), static_cast<int>(k) + 1);
  }
  t.stream->WritesDone();
  t.writes_done = true;
  return t;
}

grpc::Status RawFetch(const v1::JobAccepted& accepted, int rank) {
  auto stub = v1::ShardDataService::NewStub(
      grpc::CreateChannel(accepted.shards(rank).worker(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::FetchResultRequest request;
  request.set_job_id(accepted.job_id());
  request.set_rank(rank);
  request.set_ticket(accepted.fetch_ticket());
  auto reader = stub->FetchResult(&ctx, request);
  v1::TransferResponse response;
  while (reader->Read(&response)) {
  }
  return reader->Finish();
}

}  // namespace lact::testing
