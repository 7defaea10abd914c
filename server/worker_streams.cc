#include "server/worker_streams.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lact::server {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;
constexpr int64_t kMaxChunkBytes = 4 << 20;

}  // namespace

std::shared_ptr<grpc::Channel> WorkerChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::Status WorkerStreams::Open(const v1::ShardSpec& spec, std::chrono::system_clock::time_point deadline) {
  for (int r = 0; r < size(); ++r) {
    stubs_.push_back(v1::Worker::NewStub(WorkerChannel(addresses_[r])));
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(deadline);
    grpc::ClientContext* raw = context.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      contexts_.push_back(std::move(context));
      if (cancelled_) raw->TryCancel();
    }
    streams_.push_back(stubs_.back()->RunShard(raw));
    v1::ShardRequest request;
    *request.mutable_spec() = spec;
    request.mutable_spec()->set_rank(r);
    request.mutable_spec()->set_world_size(size());
    request.mutable_spec()->set_begin(shards_[r].first);
    request.mutable_spec()->set_tokens(shards_[r].second);
    if (!streams_.back()->Write(request)) {
      broken_rank_ = r;
      return absl::UnavailableError(absl::StrCat("worker ", addresses_[r], " (rank ", r, ") did not take the shard"));
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerStreams::Forward(int64_t offset, int64_t n, int64_t width, std::string f32_bytes) {
  const int64_t row_bytes = 4 * width, per_chunk = std::max<int64_t>(1, kMaxChunkBytes / row_bytes);
  for (int r = 0; r < size() && n > 0; ++r) {
    const auto [begin, tokens] = shards_[r];
    const int64_t lo = std::max(offset, begin), hi = std::min(offset + n, begin + tokens);
    for (int64_t t = lo; t < hi; t += per_chunk) {
      const int64_t count = std::min(per_chunk, hi - t);
      v1::ShardRequest request;
      request.mutable_chunk()->set_offset(t - begin);
      if (count == n) {
        request.mutable_chunk()->set_data(std::move(f32_bytes));  // the whole chunk: no copy
      } else {
        request.mutable_chunk()->set_data(f32_bytes.substr((t - offset) * row_bytes, count * row_bytes));
      }
      if (!streams_[r]->Write(request)) {
        broken_rank_ = r;
        return absl::UnavailableError(absl::StrCat("worker ", addresses_[r], " (rank ", r, ") stopped taking tokens"));
      }
    }
  }
  return absl::OkStatus();
}

void WorkerStreams::CloseUploads() {
  for (auto& s : streams_) s->WritesDone();
}

void WorkerStreams::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  for (auto& c : contexts_) c->TryCancel();
}

}  // namespace lact::server
