// The Submit flow: the gRPC adapter of a job's run (job_run.h). It admits
// the job (its files resolved, its plan made, its record created), hands
// the call's end to the run, and turns the run's outcome into the call's
// status.
#include "absl/time/time.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/status_conversion.h"
#include "server/job_files.h"
#include "server/job_flows.h"
#include "server/job_machine.h"
#include "server/job_run.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

// The Submit call as a job's run sees it.
class SubmitJobCall final : public JobCall {
 public:
  explicit SubmitJobCall(SubmitCall* call) : call_(call) {}
  bool Write(const v1::SubmitResponse& response) override { return call_->Write(response); }
  bool ended() const override { return call_->ended(); }
  bool EndsWithin(absl::Duration wait) const override { return call_->EndsWithin(wait); }
  std::chrono::system_clock::time_point deadline() const override { return call_->deadline(); }

 private:
  SubmitCall* const call_;
};

// Admits the job: its record under a new id. `folder`: where in the data
// root the job's files may be (its tenant's folder, or empty for the whole
// root).
absl::StatusOr<AdmittedJob> Admit(const Coordinator& c, const v1::SubmitRequest& request,
                                  const std::string& folder) {
  if (!request.has_spec()) return absl::InvalidArgumentError(kNoJobSpec);
  AdmittedJob job;
  job.spec = request.spec();
  LACT_ASSIGN_OR_RETURN(job.files, ResolveJobFiles(c.options.data_root, folder, &job.spec));
  LACT_ASSIGN_OR_RETURN(job.plan, PlanJob(job.spec, *c.registry, c.options.limits));
  LACT_ASSIGN_OR_RETURN(job.id, c.jobs->Create(job.spec));
  Log(LogLevel::kInfo, "job_admitted",
      {{"job", job.id},
       {"tenant", job.spec.tenant()},
       {"model", job.spec.model()},
       {"context_tokens", job.spec.context_tokens()},
       {"workers", job.plan.workers},
       {"by_reference", job.spec.has_context_ref()}});
  return job;
}

absl::Status RunSubmitFlow(const Coordinator& c, const v1::SubmitRequest& request,
                           const std::string& folder, SubmitCall& call) {
  absl::StatusOr<AdmittedJob> job = Admit(c, request, folder);
  if (!job.ok()) return job.status();
  auto machine = std::make_shared<JobMachine>(job->id);
  // A cancel wakes the queue, which looks at it only then.
  c.jobs->SetCanceller(job->id, [machine, registry = c.registry](CancelCause cause) {
    const bool cancelled = machine->Cancel(cause);
    registry->WakeWaiters();
    return cancelled;
  });
  GrpcJobTransport transport(c.cluster);
  SubmitJobCall job_call(&call);
  JobRun run(c, &transport, &job_call, *std::move(job), machine);
  SubmitCall::EndWatch watch(&call, [&run, registry = c.registry] {
    run.OnCallEnded();
    registry->WakeWaiters();
  });
  return run.Run();
}

}  // namespace

absl::Status RunSubmit(const Coordinator& coordinator, const Caller& caller,
                       const v1::SubmitRequest& request, SubmitCall& call) {
  const absl::Status status = [&] {
    if (coordinator.draining != nullptr && *coordinator.draining) {
      return absl::UnavailableError(
          "the coordinator is shutting down (it got SIGTERM) and takes no new "
          "jobs; submit to its replacement");
    }
    if (caller.any_tenant || !request.has_spec()) {
      return RunSubmitFlow(coordinator, request, "", call);
    }
    v1::SubmitRequest owned = request;  // the job belongs to the tenant whose token submitted it
    owned.mutable_spec()->set_tenant(caller.tenant);
    const std::string folder = coordinator.options.tenant_folders ? caller.tenant : "";
    return RunSubmitFlow(coordinator, owned, folder, call);
  }();
  ReportCallEnd(coordinator, "Submit", caller, "", status);
  return status;
}

}  // namespace lact::server
