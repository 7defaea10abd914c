// The Control gRPC service (thin adapter): worker registration and
// heartbeats into the WorkerRegistry, rendezvous KV into the KvStore.
#ifndef LACT_SERVER_CONTROL_SERVICE_H_
#define LACT_SERVER_CONTROL_SERVICE_H_

#include "lact/v1/control.grpc.pb.h"
#include "server/kv_store.h"
#include "server/worker_registry.h"

namespace lact::server {

class ControlService final : public v1::Control::Service {
 public:
  ControlService(WorkerRegistry* registry, KvStore* kv) : registry_(registry), kv_(kv) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest*, v1::KvSetResponse*) override;
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest*, v1::KvGetResponse*) override;

 private:
  WorkerRegistry* registry_;
  KvStore* kv_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_CONTROL_SERVICE_H_
