#include "server/coordinator_service.h"

#include "proto/status_conversion.h"
#include "server/worker_streams.h"

namespace lact::server {

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                                        v1::JobInfo* response) {
  c_.jobs->Expire();
  absl::StatusOr<v1::JobInfo> info = c_.jobs->Get(request->job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *info;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::GetJobRequest* request,
                                          grpc::ServerWriter<v1::JobInfo>* writer) {
  uint64_t seen = 0;
  while (!context->IsCancelled()) {
    const uint64_t before = seen;  // the 1 s wake-up only looks for a watcher that went away
    absl::StatusOr<v1::JobInfo> info =
        c_.jobs->WaitForChange(request->job_id(), &seen, std::chrono::seconds(1));
    if (!info.ok()) return ToGrpcStatus(info.status());
    if (seen == before) continue;
    if (!writer->Write(*info)) break;
    if (info->status() != v1::JobInfo::RUNNING && info->status() != v1::JobInfo::QUEUED)
      return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                                          v1::ListJobsResponse* response) {
  c_.jobs->Expire();
  for (v1::JobInfo& info : c_.jobs->List()) {
    info.mutable_accepted()->clear_ticket();  // only GetJob and WatchJob, for one job, show it
    *response->add_jobs() = std::move(info);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext*,
                                           const v1::CancelJobRequest* request,
                                           v1::JobInfo* response) {
  absl::StatusOr<v1::JobInfo> info = c_.jobs->Cancel(request->job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *info;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteJob(grpc::ServerContext*,
                                           const v1::DeleteJobRequest* request,
                                           v1::DeleteJobResponse*) {
  absl::StatusOr<v1::JobInfo> deleted = c_.jobs->Delete(request->job_id());
  if (!deleted.ok()) return ToGrpcStatus(deleted.status());
  // A job that had not ended is cancelled, and its flow has the workers
  // forget it; an ended one's workers are told here.
  if (deleted->status() == v1::JobInfo::SUCCEEDED) {
    std::vector<std::string> workers;
    for (const v1::ShardRange& shard : deleted->accepted().shards())
      workers.push_back(shard.worker());
    ForgetOnWorkers(request->job_id(), deleted->accepted().fetch_ticket(), workers);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* response) {
  for (const ModelEntry& m : c_.registry->Models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m.name);
    info->set_config_json(ModelConfigToJson(m.config));
    info->set_workers(m.workers);
  }
  return grpc::Status::OK;
}

}  // namespace lact::server
