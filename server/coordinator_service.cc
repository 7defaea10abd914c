#include "server/coordinator_service.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "proto/status_conversion.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// One WatchJob call: a thread waits for the job's changes and writes each;
// the call's end (OnCancel) stops the wait at once.
class JobWatch final : public grpc::ServerWriteReactor<v1::JobInfo> {
 public:
  // The thread waits for the lock, so thread_ is set before it can end the
  // call (and OnDone read it).
  JobWatch(JobStore* jobs, std::string id) : jobs_(jobs), id_(std::move(id)) {
    absl::MutexLock lock(&mu_);
    thread_ = std::thread([this] {
      { absl::MutexLock gate(&mu_); }
      Finish(Run());
    });
  }

 private:
  grpc::Status Run() {
    uint64_t seen = 0;
    while (!gone_) {
      const uint64_t before = seen;
      absl::StatusOr<v1::JobInfo> info =
          jobs_->WaitForChange(id_, &seen, std::chrono::hours(1), &gone_);
      if (!info.ok()) return ToGrpcStatus(info.status());
      if (seen == before) continue;
      if (!Write(*info)) break;
      if (info->status() != v1::JobInfo::RUNNING && info->status() != v1::JobInfo::QUEUED) {
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
  }

  // Blocks until gRPC has taken the message; false once the call ended.
  bool Write(const v1::JobInfo& info) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      written_ = false;
    }
    StartWrite(&info);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&written_));
    return write_ok_;
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    written_ = true;
  }
  void OnCancel() override {
    gone_ = true;
    jobs_->Wake();
  }
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_) {
    { absl::MutexLock lock(&mu_); }  // pairs with the gate in the constructor
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();  // it has called Finish: it is returning
    }
    delete this;
  }

  JobStore* const jobs_;
  const std::string id_;
  std::atomic<bool> gone_{false};
  absl::Mutex mu_;
  bool written_ ABSL_GUARDED_BY(mu_) = true;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // set under mu_ in the constructor
};

}  // namespace

grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* CoordinatorService::Submit(
    grpc::CallbackServerContext* context) {
  return SubmitCall::Start(context, kNoJobSpec,
                           [c = c_](const v1::SubmitRequest& first, SubmitCall& call) {
                             return RunSubmit(c, first, call);
                           });
}

grpc::ServerBidiReactor<v1::QueryRequest, v1::SubmitResponse>* CoordinatorService::Query(
    grpc::CallbackServerContext* context) {
  return QueryCall::Start(context, kNoQuerySpec,
                          [c = c_](const v1::QueryRequest& first, QueryCall& call) {
                            return RunQuery(c, first, call);
                          });
}

grpc::ServerWriteReactor<v1::JobInfo>* CoordinatorService::WatchJob(
    grpc::CallbackServerContext*, const v1::GetJobRequest* request) {
  return new JobWatch(c_.jobs, request->job_id());
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* context,
                                                     const v1::GetJobRequest* request,
                                                     v1::JobInfo* response) {
  return Reply(context, GetJob(*request, response));
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest*,
                                                       v1::ListJobsResponse* response) {
  return Reply(context, ListJobs(response));
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* context,
                                                        const v1::CancelJobRequest* request,
                                                        v1::JobInfo* response) {
  return Reply(context, CancelJob(*request, response));
}

grpc::ServerUnaryReactor* CoordinatorService::DeleteJob(grpc::CallbackServerContext* context,
                                                        const v1::DeleteJobRequest* request,
                                                        v1::DeleteJobResponse*) {
  absl::StatusOr<v1::JobInfo> deleted = c_.jobs->Delete(request->job_id());
  if (!deleted.ok()) return Reply(context, ToGrpcStatus(deleted.status()));
  // A job that had not ended is cancelled, and its flow has the workers
  // forget it. An ended one's workers are told here, off gRPC's callback
  // thread (the calls to them may take seconds); the reply waits for them.
  if (deleted->status() != v1::JobInfo::SUCCEEDED) return Reply(context, grpc::Status::OK);
  std::vector<std::string> workers;
  for (const v1::ShardRange& shard : deleted->accepted().shards())
    workers.push_back(shard.worker());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::thread([reactor, id = request->job_id(), ticket = deleted->accepted().fetch_ticket(),
               workers = std::move(workers)] {
    ForgetOnWorkers(id, ticket, workers);
    reactor->Finish(grpc::Status::OK);
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ListModels(grpc::CallbackServerContext* context,
                                                         const v1::ListModelsRequest*,
                                                         v1::ListModelsResponse* response) {
  return Reply(context, ListModels(response));
}

grpc::Status CoordinatorService::GetJob(const v1::GetJobRequest& request, v1::JobInfo* response) {
  c_.jobs->Expire();
  absl::StatusOr<v1::JobInfo> info = c_.jobs->Get(request.job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *info;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(v1::ListJobsResponse* response) {
  c_.jobs->Expire();
  for (v1::JobInfo& info : c_.jobs->List()) {
    info.mutable_accepted()->clear_ticket();  // only GetJob and WatchJob, for one job, show it
    *response->add_jobs() = std::move(info);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(const v1::CancelJobRequest& request,
                                           v1::JobInfo* response) {
  absl::StatusOr<v1::JobInfo> info = c_.jobs->Cancel(request.job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *info;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListModels(v1::ListModelsResponse* response) {
  for (const ModelEntry& m : c_.registry->Models()) {
    v1::ModelInfo* info = response->add_models();
    info->set_name(m.name);
    info->set_config_json(ModelConfigToJson(m.config));
    info->set_workers(m.workers);
  }
  return grpc::Status::OK;
}

}  // namespace lact::server
