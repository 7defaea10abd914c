// The Worker gRPC service: an adapter from its calls to the worker's flows
// (worker_flows.h), which it counts so that a draining worker (SIGTERM)
// takes no new work and waits for what runs. Calls from anyone but the
// coordinator (no cluster secret) are UNAUTHENTICATED. The streaming calls
// run on gRPC's callback API (proto/write_call.h).
#ifndef LACT_WORKER_WORKER_SERVICE_H_
#define LACT_WORKER_WORKER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/call_caps.h"
#include "lact/v1/worker.grpc.pb.h"
#include "worker/shard_board.h"
#include "worker/worker_flows.h"

namespace lact {

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerService(WorkerContext context);

  grpc::ServerWriteReactor<v1::RunShardResponse>* RunShard(
      grpc::CallbackServerContext* context, const v1::RunShardRequest* request) override;
  grpc::ServerWriteReactor<v1::RunQueryResponse>* RunQuery(
      grpc::CallbackServerContext* context, const v1::RunQueryRequest* request) override;
  grpc::ServerUnaryReactor* Forget(grpc::CallbackServerContext* context,
                                   const v1::ForgetRequest* request,
                                   v1::ForgetResponse* response) override;
  grpc::ServerWriteReactor<v1::RunShardResponse>* AttachShard(
      grpc::CallbackServerContext* context, const v1::AttachShardRequest* request) override;

  // Takes no new shards or queries from now on (UNAVAILABLE, "draining");
  // those running go on.
  void Drain();
  // Waits until no shard or query runs, or `deadline`; false at the deadline.
  bool AwaitIdle(absl::Time deadline);

 private:
  absl::Status CheckCoordinator(const grpc::ServerContextBase& context) const;
  // A shard or query that counts as running while it lives; UNAVAILABLE
  // when the worker drains.
  absl::Status Enter();
  void Leave();

  WorkerContext w_;
  std::unique_ptr<ShardBoard> own_shards_;  // when the context gives none
  std::unique_ptr<ComputeLine> own_line_;   // likewise
  CallCaps queries_;                        // RunQuery calls running (one key: the worker's)
  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_SERVICE_H_
