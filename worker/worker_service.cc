#include "worker/worker_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/auth.h"
#include "proto/metadata_keys.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

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
  return RunShardCall::Start(context, [this, context, request](RunShardCall& call) {
    if (absl::Status s = CheckCoordinator(*context); !s.ok()) return s;
    return AttachShardFlow(w_, *request, call);
  });
}

grpc::ServerWriteReactor<v1::RunShardResponse>* WorkerService::RunShard(
    grpc::CallbackServerContext* context, const v1::RunShardRequest* request) {
  context->AddTrailingMetadata(kWorkerStatusKey, "1");
  return RunShardCall::Start(context, [this, context, request](RunShardCall& call) {
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
  return RunQueryCall::Start(context, [this, context, request](RunQueryCall& call) {
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
