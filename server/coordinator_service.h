// The public Coordinator gRPC service: a thin adapter over the job flows,
// the job store and the worker registry.
#ifndef LACT_SERVER_COORDINATOR_SERVICE_H_
#define LACT_SERVER_COORDINATOR_SERVICE_H_

#include "lact/v1/coordinator.grpc.pb.h"
#include "server/job_flows.h"

namespace lact::server {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  explicit CoordinatorService(Coordinator coordinator) : c_(coordinator) {}

  grpc::Status Submit(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream) override {
    return RunSubmit(c_, context, stream);
  }
  grpc::Status Query(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SubmitResponse, v1::QueryRequest>* stream) override {
    return RunQuery(c_, context, stream);
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::JobInfo*) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                        grpc::ServerWriter<v1::JobInfo>* writer) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::JobInfo*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest*,
                         v1::DeleteJobResponse*) override;
  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse*) override;

 private:
  Coordinator c_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_COORDINATOR_SERVICE_H_
