#include "server/control_service.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/auth.h"
#include "proto/status_conversion.h"

namespace lact::server {

namespace {

constexpr absl::string_view kClusterSecret = "the cluster secret (--cluster-secret-file)";

}  // namespace

grpc::Status ControlService::Register(grpc::ServerContext* context,
                                      const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  return ToGrpcStatus(Register(*context, *request, response));
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext* context,
                                       const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  return ToGrpcStatus(Heartbeat(*context, *request, response));
}

grpc::Status ControlService::Deregister(grpc::ServerContext* context,
                                        const v1::DeregisterRequest* request,
                                        v1::DeregisterResponse*) {
  return ToGrpcStatus(Deregister(*context, *request));
}

grpc::Status ControlService::KvSet(grpc::ServerContext* context, const v1::KvSetRequest* request,
                                   v1::KvSetResponse*) {
  return ToGrpcStatus(KvSet(*context, *request));
}

grpc::Status ControlService::KvGet(grpc::ServerContext* context, const v1::KvGetRequest* request,
                                   v1::KvGetResponse* response) {
  return ToGrpcStatus(KvGet(*context, *request, response));
}

absl::Status ControlService::Register(const grpc::ServerContext& context,
                                      const v1::RegisterRequest& request,
                                      v1::RegisterResponse* response) {
  LACT_RETURN_IF_ERROR(CheckSecret(context, secret_, kClusterSecret));
  if (request.address().empty()) return absl::InvalidArgumentError("address is empty");
  std::map<std::string, ModelConfig> models;
  for (const v1::WorkerModel& m : request.models()) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(m.config_json());
    if (!config.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", m.name(), "': ", config.status().message()));
    }
    models[m.name()] = *config;
  }
  LACT_ASSIGN_OR_RETURN(
      std::string id, registry_->Register(request.address(), request.backend(), std::move(models),
                                          request.metrics_address(), request.staging_bytes() > 0));
  response->set_worker_id(id);
  response->set_heartbeat_interval_ms(
      static_cast<int32_t>(registry_->heartbeat_interval().count()));
  return absl::OkStatus();
}

absl::Status ControlService::Heartbeat(const grpc::ServerContext& context,
                                       const v1::HeartbeatRequest& request,
                                       v1::HeartbeatResponse* response) {
  LACT_RETURN_IF_ERROR(CheckSecret(context, secret_, kClusterSecret));
  response->set_known(registry_->Heartbeat(request.worker_id()));
  for (const v1::DroppedResults& dropped : request.dropped())
    jobs_->ResultsDropped(dropped.job_id(), dropped.state(), dropped.why());
  // A held shard is followed again only by a job taken back after a
  // restart; every other one is let go (its job ended, was cancelled, or
  // runs again elsewhere).
  for (const v1::HeldShard& held : request.held_shards()) {
    if (!jobs_->WantsHeldShard(held.job_id(), held.attempt())) *response->add_drop_shards() = held;
  }
  return absl::OkStatus();
}

absl::Status ControlService::Deregister(const grpc::ServerContext& context,
                                        const v1::DeregisterRequest& request) {
  LACT_RETURN_IF_ERROR(CheckSecret(context, secret_, kClusterSecret));
  registry_->Deregister(request.worker_id());
  return absl::OkStatus();
}

absl::Status ControlService::KvSet(const grpc::ServerContext& context,
                                   const v1::KvSetRequest& request) {
  LACT_RETURN_IF_ERROR(CheckSecret(context, secret_, kClusterSecret));
  // The store takes keys only of a job's running attempt (kv_store.h).
  return kv_->Set(request.key(), request.value());
}

absl::Status ControlService::KvGet(const grpc::ServerContext& context,
                                   const v1::KvGetRequest& request, v1::KvGetResponse* response) {
  LACT_RETURN_IF_ERROR(CheckSecret(context, secret_, kClusterSecret));
  const int timeout_ms = std::clamp(request.timeout_ms(), 0, 600000);
  LACT_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        kv_->Get({request.keys().begin(), request.keys().end()},
                                 std::chrono::milliseconds(timeout_ms)));
  for (std::string& v : values) response->add_values(std::move(v));
  return absl::OkStatus();
}

}  // namespace lact::server
