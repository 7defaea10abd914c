// The public Coordinator gRPC service, on gRPC's callback API: a thin
// adapter over the job flows, the job store and the worker registry. Every
// call is authenticated first (tenant_tokens.h); a job another tenant
// owns is NOT_FOUND.
// Submit and Query run their flows on a thread per call (write_call.h);
// WatchJob waits for changes of the
// job on a thread per watcher (woken when the watcher goes); the unary
// methods answer on gRPC's callback thread, but for DeleteJob's calls to the
// workers, which run on a thread of their own. The end of a call reaches
// its flow through OnCancel.
#ifndef LACT_SERVER_COORDINATOR_SERVICE_H_
#define LACT_SERVER_COORDINATOR_SERVICE_H_

#include "lact/v1/coordinator.grpc.pb.h"
#include "server/job_flows.h"

namespace lact::server {

class CoordinatorService final : public v1::CoordinatorService::CallbackService {
 public:
  explicit CoordinatorService(CoordinatorContext coordinator) : ctx_(coordinator) {}

  grpc::ServerWriteReactor<v1::SubmitResponse>* Submit(grpc::CallbackServerContext* context,
                                                       const v1::SubmitRequest* request) override;
  grpc::ServerWriteReactor<v1::QueryResponse>* Query(grpc::CallbackServerContext* context,
                                                     const v1::QueryRequest* request) override;
  grpc::ServerWriteReactor<v1::JobInfo>* WatchJob(grpc::CallbackServerContext* context,
                                                  const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::JobInfo* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::JobInfo* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const v1::DeleteJobRequest* request,
                                      v1::DeleteJobResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;

 private:
  absl::Status GetJob(const v1::GetJobRequest& request, v1::JobInfo* response);
  absl::Status ListJobs(const Caller& caller, v1::ListJobsResponse* response);
  // The authenticated caller, if it owns job `job_id` (NOT_FOUND, as for an
  // unknown job, otherwise).
  absl::StatusOr<Caller> Owner(const grpc::CallbackServerContext& context,
                               const std::string& job_id) const;
  absl::Status CancelJob(const v1::CancelJobRequest& request, v1::JobInfo* response);
  absl::Status ListModels(v1::ListModelsResponse* response);
  absl::Status ListWorkers(v1::ListWorkersResponse* response);

  CoordinatorContext ctx_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_COORDINATOR_SERVICE_H_
