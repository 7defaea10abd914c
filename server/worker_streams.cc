#include "server/worker_streams.h"

#include "absl/strings/str_cat.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/status_conversion.h"

namespace lact::server {

std::shared_ptr<grpc::Channel> WorkerChannel(const ClusterLink& link, const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  args.SetMaxSendMessageSize(kMaxServerMessageBytes);
  return MakeChannel(address, link.credentials, args, link.secret);
}

void ForgetOnWorkers(const ClusterLink& link, const std::string& job_id,
                     const std::string& fetch_ticket, const std::vector<std::string>& workers) {
  for (const std::string& address : workers) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ForgetRequest request;
    request.set_job_id(job_id);
    request.set_fetch_ticket(fetch_ticket);
    v1::ForgetResponse response;
    v1::WorkerService::NewStub(WorkerChannel(link, address))
        ->Forget(&ctx, request, &response)
        .IgnoreError();
  }
}

absl::Status WorkerStreams::Open(const std::vector<v1::ShardSpec>& specs,
                                 std::chrono::system_clock::time_point deadline) {
  for (int r = 0; r < size(); ++r) {
    stubs_.push_back(v1::WorkerService::NewStub(WorkerChannel(link_, addresses_[r])));
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(deadline);
    grpc::ClientContext* raw = context.get();
    {
      absl::MutexLock lock(&mu_);
      contexts_.push_back(std::move(context));
      if (cancelled_) raw->TryCancel();
    }
    // A worker that cannot take the call shows in its stream's end
    // (Finish: not from the worker).
    if (!follow_job_.empty()) {
      v1::AttachShardRequest request;
      request.set_job_id(follow_job_);
      request.set_attempt(follow_attempt_);
      request.set_rank(r);
      streams_.push_back(stubs_.back()->AttachShard(raw, request));
      continue;
    }
    v1::RunShardRequest request;
    *request.mutable_spec() = specs[r];
    streams_.push_back(stubs_.back()->RunShard(raw, request));
  }
  return absl::OkStatus();
}

RankEnd WorkerStreams::Finish(int rank) {
  const grpc::Status s = streams_[rank]->Finish();
  grpc::ClientContext* context;
  {
    absl::MutexLock lock(&mu_);
    context = contexts_[rank].get();
  }
  return {FromGrpcStatus(s), context->GetServerTrailingMetadata().count(kWorkerStatusKey) > 0};
}

void WorkerStreams::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& c : contexts_) c->TryCancel();
}

}  // namespace lact::server
