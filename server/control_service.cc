#include "server/control_service.h"

#include "absl/strings/str_cat.h"
#include "proto/status_conversion.h"

namespace lact::server {

grpc::Status ControlService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
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
  response->set_worker_id(
      registry_->Register(request->address(), request->backend(), std::move(models)));
  response->set_heartbeat_interval_ms(
      static_cast<int32_t>(registry_->heartbeat_interval().count()));
  return grpc::Status::OK;
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  response->set_known(registry_->Heartbeat(request->worker_id()));
  return grpc::Status::OK;
}

grpc::Status ControlService::KvSet(grpc::ServerContext*, const v1::KvSetRequest* request,
                                   v1::KvSetResponse*) {
  kv_->Set(request->key(), request->value());
  return grpc::Status::OK;
}

grpc::Status ControlService::KvGet(grpc::ServerContext*, const v1::KvGetRequest* request,
                                   v1::KvGetResponse* response) {
  const int timeout_ms = std::clamp(request->timeout_ms(), 0, 600000);
  absl::StatusOr<std::vector<std::string>> values = kv_->Get(
      {request->keys().begin(), request->keys().end()}, std::chrono::milliseconds(timeout_ms));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) response->add_values(std::move(v));
  return grpc::Status::OK;
}

}  // namespace lact::server
