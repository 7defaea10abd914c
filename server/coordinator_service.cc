#include "server/coordinator_service.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "proto/metadata_keys.h"
#include "proto/status_conversion.h"
#include "proto/write_call.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

// Ends a unary call with `status`, converted here (the call's edge).
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// One WatchJob call: waits for the job's changes and writes each; the
// call's end stops the wait at once.
absl::Status WatchJobFlow(JobStore& jobs, const std::string& id, WriteCall<v1::JobInfo>& call) {
  std::atomic<bool> gone{false};
  WriteCall<v1::JobInfo>::EndWatch watch(&call, [&] {
    gone = true;
    jobs.Wake();
  });
  uint64_t seen = 0;
  while (!gone) {
    const uint64_t before = seen;
    absl::StatusOr<v1::JobInfo> info = jobs.WaitForChange(id, &seen, std::chrono::hours(1), &gone);
    if (!info.ok()) return info.status();
    if (seen == before) continue;
    if (!call.Write(*info)) break;
    if (info->status() != v1::JobInfo::RUNNING && info->status() != v1::JobInfo::QUEUED) {
      return absl::OkStatus();
    }
  }
  return absl::CancelledError("the watcher went away");
}

}  // namespace

grpc::ServerWriteReactor<v1::SubmitResponse>* CoordinatorService::Submit(
    grpc::CallbackServerContext* context, const v1::SubmitRequest* request) {
  context->AddTrailingMetadata(kCoordinatorStatusKey, "1");
  if (ctx_.options.keeps_jobs) context->AddInitialMetadata(kKeepsJobsKey, "1");
  return SubmitCall::Start(context, [c = ctx_, context, request](SubmitCall& call) {
    absl::StatusOr<Caller> caller = c.tenants->Authenticate(*context);
    if (!caller.ok()) return caller.status();
    return HandleSubmit(c, *caller, *request, call);
  });
}

grpc::ServerWriteReactor<v1::QueryResponse>* CoordinatorService::Query(
    grpc::CallbackServerContext* context, const v1::QueryRequest* request) {
  return QueryCall::Start(context, [c = ctx_, context, request](QueryCall& call) {
    absl::StatusOr<Caller> caller = c.tenants->Authenticate(*context);
    if (!caller.ok()) return caller.status();
    return HandleQuery(c, *caller, *request, call);
  });
}

grpc::ServerWriteReactor<v1::JobInfo>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  absl::StatusOr<Caller> caller = Owner(*context, request->job_id());
  return WriteCall<v1::JobInfo>::Start(context,
                                       [jobs = ctx_.jobs, id = request->job_id(),
                                        caller = std::move(caller)](WriteCall<v1::JobInfo>& call) {
                                         if (!caller.ok()) return caller.status();
                                         return WatchJobFlow(*jobs, id, call);
                                       });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const v1::GetJobRequest* request,
                                                     v1::JobInfo* response) {
  absl::StatusOr<Caller> caller = Owner(*context, request->job_id());
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, GetJob(*request, response));
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest*,
                                                       v1::ListJobsResponse* response) {
  absl::StatusOr<Caller> caller = ctx_.tenants->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, ListJobs(*caller, response));
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const v1::CancelJobRequest* request,
                                                        v1::JobInfo* response) {
  absl::StatusOr<Caller> caller = Owner(*context, request->job_id());
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, CancelJob(*request, response));
}

grpc::ServerUnaryReactor* CoordinatorService::DeleteJob(grpc::CallbackServerContext* context,
                                                        const v1::DeleteJobRequest* request,
                                                        v1::DeleteJobResponse*) {
  absl::StatusOr<Caller> caller = Owner(*context, request->job_id());
  if (!caller.ok()) return Reply(context, caller.status());
  absl::StatusOr<v1::JobInfo> deleted = ctx_.jobs->Delete(request->job_id());
  if (!deleted.ok()) return Reply(context, deleted.status());
  // A job that had not ended is cancelled, and its flow has the workers
  // forget it. An ended one's workers are told here, off gRPC's callback
  // thread (the calls to them may take seconds); the reply waits for them.
  if (deleted->status() != v1::JobInfo::SUCCEEDED) return Reply(context, absl::OkStatus());
  std::vector<std::string> workers;
  for (const v1::ShardRange& shard : deleted->accepted().shards())
    workers.push_back(shard.worker());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::thread([reactor, link = ctx_.cluster, id = request->job_id(),
               ticket = deleted->accepted().fetch_ticket(), workers = std::move(workers)] {
    ForgetOnWorkers(link, id, ticket, workers);
    reactor->Finish(grpc::Status::OK);
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ListModels(grpc::CallbackServerContext* context,
                                                         const v1::ListModelsRequest*,
                                                         v1::ListModelsResponse* response) {
  absl::StatusOr<Caller> caller = ctx_.tenants->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  if (ctx_.options.keeps_jobs) context->AddInitialMetadata(kKeepsJobsKey, "1");
  return Reply(context, ListModels(response));
}

grpc::ServerUnaryReactor* CoordinatorService::ListWorkers(grpc::CallbackServerContext* context,
                                                          const v1::ListWorkersRequest*,
                                                          v1::ListWorkersResponse* response) {
  absl::StatusOr<Caller> caller = ctx_.tenants->Authenticate(*context);
  if (!caller.ok()) return Reply(context, caller.status());
  return Reply(context, ListWorkers(response));
}

absl::Status CoordinatorService::GetJob(const v1::GetJobRequest& request, v1::JobInfo* response) {
  ctx_.jobs->Expire();
  absl::StatusOr<v1::JobInfo> info = ctx_.jobs->Get(request.job_id());
  if (!info.ok()) return info.status();
  *response = *info;
  return absl::OkStatus();
}

absl::StatusOr<Caller> CoordinatorService::Owner(const grpc::CallbackServerContext& context,
                                                 const std::string& job_id) const {
  absl::StatusOr<Caller> caller = ctx_.tenants->Authenticate(context);
  if (!caller.ok()) return caller.status();
  LACT_RETURN_IF_ERROR(ctx_.jobs->CheckOwner(job_id, *caller));
  return caller;
}

absl::Status CoordinatorService::ListJobs(const Caller& caller, v1::ListJobsResponse* response) {
  ctx_.jobs->Expire();
  for (v1::JobInfo& info : ctx_.jobs->List(caller)) {
    info.mutable_accepted()->clear_ticket();  // only GetJob and WatchJob, for one job, show it
    *response->add_jobs() = std::move(info);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::CancelJob(const v1::CancelJobRequest& request,
                                           v1::JobInfo* response) {
  absl::StatusOr<v1::JobInfo> info = ctx_.jobs->Cancel(request.job_id());
  if (!info.ok()) return info.status();
  *response = *info;
  return absl::OkStatus();
}

absl::Status CoordinatorService::ListModels(v1::ListModelsResponse* response) {
  for (const ModelEntry& m : ctx_.registry->Models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m.name);
    info->set_config_json(ModelConfigToJson(m.config));
    info->set_workers(m.workers);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::ListWorkers(v1::ListWorkersResponse* response) {
  const auto now = std::chrono::steady_clock::now();
  for (const WorkerRegistry::Listed& listed : ctx_.registry->Workers()) {
    const WorkerEntry& w = listed.entry;
    v1::WorkerInfo* info = response->add_workers();
    info->set_id(w.id);
    info->set_address(w.address);
    info->set_backend(w.backend);
    for (const auto& [name, config] : w.models) info->add_models(name);
    info->set_healthy(listed.healthy);
    info->set_leased(w.busy());
    info->set_draining(w.leaving);
    info->set_seconds_since_heartbeat(std::chrono::duration<double>(now - w.last_seen).count());
    info->set_metrics_address(w.metrics_address);
  }
  return absl::OkStatus();
}

}  // namespace lact::server
