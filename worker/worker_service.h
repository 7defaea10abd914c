// The Worker gRPC service (thin adapter): RunShard runs one shard of a
// job's context with the group's Gloo collectives, RunQuery runs query sets
// against a fused state sent with the request. One shard at a time per
// worker is the coordinator's policy; the service itself is re-entrant.
#ifndef LACT_WORKER_WORKER_SERVICE_H_
#define LACT_WORKER_WORKER_SERVICE_H_

#include <chrono>
#include <memory>
#include <string>

#include "lact/v1/control.grpc.pb.h"
#include "lact/v1/worker.grpc.pb.h"
#include "worker/model_cache.h"

namespace lact {

struct WorkerServiceOptions {
  int threads = 0;                  // compute threads, 0 = all cores
  int64_t tile_tokens = 4096;
  std::string collective_host = "127.0.0.1";  // address Gloo listens on
};

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(ModelCache* models, std::shared_ptr<v1::Control::Stub> control, WorkerServiceOptions options)
      : models_(models), control_(std::move(control)), options_(std::move(options)) {}

  grpc::Status RunShard(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::ShardResponse, v1::ShardRequest>* stream) override;
  grpc::Status RunQuery(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<v1::ShardResponse, v1::WorkerQueryRequest>* stream) override;

 private:
  ModelCache* models_;
  std::shared_ptr<v1::Control::Stub> control_;
  WorkerServiceOptions options_;
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_SERVICE_H_
