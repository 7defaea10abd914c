// The Control gRPC service (thin adapter): worker registration and
// heartbeats into the WorkerRegistry, rendezvous KV into the KvStore. Only
// workers that present the cluster secret are served (UNAUTHENTICATED
// otherwise), so no one else can register an address to receive a job's
// tokens or touch a job's rendezvous keys. Heartbeats answer which of the
// shards a worker holds (its coordinator call ended) to let go.
#ifndef LACT_SERVER_CONTROL_SERVICE_H_
#define LACT_SERVER_CONTROL_SERVICE_H_

#include <string>

#include "absl/status/status.h"
#include "lact/v1/control.grpc.pb.h"
#include "server/job_store.h"
#include "server/kv_store.h"
#include "server/worker_registry.h"

namespace lact::server {

class ControlService final : public v1::ControlService::Service {
 public:
  // Every call must present `cluster_secret` (none when empty); KvSet
  // writes only keys of a job's running attempt ("JOB_ID/ATTEMPT/...").
  ControlService(WorkerRegistry* registry, KvStore* kv, JobStore* jobs, std::string cluster_secret)
      : registry_(registry), kv_(kv), jobs_(jobs), secret_(std::move(cluster_secret)) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::Status Deregister(grpc::ServerContext*, const v1::DeregisterRequest*,
                          v1::DeregisterResponse*) override;
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest*, v1::KvSetResponse*) override;
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest*, v1::KvGetResponse*) override;

 private:
  // The calls' bodies; the overrides above convert their status once.
  absl::Status Register(const grpc::ServerContext& context, const v1::RegisterRequest& request,
                        v1::RegisterResponse* response);
  absl::Status Heartbeat(const grpc::ServerContext& context, const v1::HeartbeatRequest& request,
                         v1::HeartbeatResponse* response);
  absl::Status Deregister(const grpc::ServerContext& context, const v1::DeregisterRequest& request);
  absl::Status KvSet(const grpc::ServerContext& context, const v1::KvSetRequest& request);
  absl::Status KvGet(const grpc::ServerContext& context, const v1::KvGetRequest& request,
                     v1::KvGetResponse* response);

  WorkerRegistry* registry_;
  KvStore* kv_;
  JobStore* jobs_;  // where the results workers report dropped are marked
  const std::string secret_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_CONTROL_SERVICE_H_
