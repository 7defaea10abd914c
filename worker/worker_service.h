// The Worker gRPC service (thin adapter): RunShard runs one shard of a
// job's context with its group (on the CPU or a GPU, shard_runner.h),
// RunQuery runs query sets against a fused state sent with the request. One shard at a time per
// worker is the coordinator's policy; the service itself is re-entrant.
#ifndef LACT_WORKER_WORKER_SERVICE_H_
#define LACT_WORKER_WORKER_SERVICE_H_

#include <chrono>
#include <memory>
#include <string>

#include "lact/v1/control.grpc.pb.h"
#include "lact/v1/worker.grpc.pb.h"
#include "worker/model_cache.h"
#include "worker/shard_runner.h"

namespace lact {

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(ModelCache* models, std::shared_ptr<v1::Control::Stub> control, BackendOptions options)
      : models_(models), control_(std::move(control)), options_(std::move(options)) {}

  grpc::Status RunShard(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::ShardResponse, v1::ShardRequest>* stream) override;
  grpc::Status RunQuery(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::ShardResponse, v1::WorkerQueryRequest>* stream) override;

 private:
  ModelCache* models_;
  std::shared_ptr<v1::Control::Stub> control_;
  BackendOptions options_;
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_SERVICE_H_
