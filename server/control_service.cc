#include "server/control_service.h"

#include "absl/strings/str_cat.h"
#include "proto/auth.h"
#include "proto/status_conversion.h"

namespace lact::server {

namespace {

constexpr absl::string_view kClusterSecret = "the cluster secret (--cluster-secret-file)";

}  // namespace

grpc::Status ControlService::Register(grpc::ServerContext* context,
                                      const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  if (absl::Status s = CheckSecret(*context, secret_, kClusterSecret); !s.ok())
    return ToGrpcStatus(s);
  if (request->address().empty())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "address is empty");
  std::map<std::string, ModelConfig> models;
  for (const v1::WorkerModel& m : request->models()) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(m.config_json());
    if (!config.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("model '", m.name(), "': ", config.status().message()));
    }
    models[m.name()] = *config;
  }
  absl::StatusOr<std::string> id = registry_->Register(
      request->address(), request->backend(), std::move(models), request->metrics_address());
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_worker_id(*id);
  response->set_heartbeat_interval_ms(
      static_cast<int32_t>(registry_->heartbeat_interval().count()));
  return grpc::Status::OK;
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext* context,
                                       const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  if (absl::Status s = CheckSecret(*context, secret_, kClusterSecret); !s.ok())
    return ToGrpcStatus(s);
  response->set_known(registry_->Heartbeat(request->worker_id()));
  for (const v1::DroppedResults& dropped : request->dropped())
    jobs_->ResultsDropped(dropped.job_id(), dropped.state(), dropped.why());
  return grpc::Status::OK;
}

grpc::Status ControlService::Deregister(grpc::ServerContext* context,
                                        const v1::DeregisterRequest* request,
                                        v1::DeregisterResponse*) {
  if (absl::Status s = CheckSecret(*context, secret_, kClusterSecret); !s.ok())
    return ToGrpcStatus(s);
  registry_->Deregister(request->worker_id());
  return grpc::Status::OK;
}

grpc::Status ControlService::KvSet(grpc::ServerContext* context, const v1::KvSetRequest* request,
                                   v1::KvSetResponse*) {
  if (absl::Status s = CheckSecret(*context, secret_, kClusterSecret); !s.ok())
    return ToGrpcStatus(s);
  // The store takes keys only of a job's running attempt (kv_store.h).
  return ToGrpcStatus(kv_->Set(request->key(), request->value()));
}

grpc::Status ControlService::KvGet(grpc::ServerContext* context, const v1::KvGetRequest* request,
                                   v1::KvGetResponse* response) {
  if (absl::Status s = CheckSecret(*context, secret_, kClusterSecret); !s.ok())
    return ToGrpcStatus(s);
  const int timeout_ms = std::clamp(request->timeout_ms(), 0, 600000);
  absl::StatusOr<std::vector<std::string>> values = kv_->Get(
      {request->keys().begin(), request->keys().end()}, std::chrono::milliseconds(timeout_ms));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) response->add_values(std::move(v));
  return grpc::Status::OK;
}

}  // namespace lact::server
