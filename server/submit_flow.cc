// The Submit flow: the gRPC adapter of a job's run (job_run.h). It admits
// the job (its files resolved, its plan made, its record created), hands
// the call's end to the run, and turns the run's outcome into the call's
// status. A call whose request_id its tenant used before (its client lost
// the first call to a coordinator restart) follows that job instead.
#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
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

constexpr size_t kMaxRequestIdBytes = 128;

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

// The job's plan. A coordinator that just started gives its workers time
// to register (each finds it at its next heartbeat) before it refuses a
// job for want of them: a client that made its call again through a
// restart is not turned away for that.
absl::StatusOr<JobPlan> Plan(const CoordinatorContext& c, const v1::JobSpec& spec) {
  const auto settled =
      c.started + std::max<std::chrono::steady_clock::duration>(
                      std::chrono::seconds(5), 5 * c.registry->heartbeat_interval());
  absl::StatusOr<JobPlan> plan = PlanJob(spec, *c.registry, c.options.limits);
  while (!plan.ok() && std::chrono::steady_clock::now() < settled) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    plan = PlanJob(spec, *c.registry, c.options.limits);
  }
  return plan;
}

// Admits the job: its record under a new id. `folder`: where in the data
// root the job's files may be (its tenant's folder, or empty for the whole
// root).
absl::StatusOr<AdmittedJob> Admit(const CoordinatorContext& c, const v1::SubmitRequest& request,
                                  const std::string& folder) {
  if (!request.has_spec()) return absl::InvalidArgumentError(kNoJobSpec);
  AdmittedJob job;
  job.spec = request.spec();
  LACT_ASSIGN_OR_RETURN(job.files, ResolveJobFiles(c.options.data_root, folder, &job.spec));
  LACT_ASSIGN_OR_RETURN(job.plan, Plan(c, job.spec));
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

// The status a followed job's end gives the call: its error, CANCELLED
// for a job cancelled, ABORTED for one that failed.
absl::Status FollowedEnd(const v1::JobInfo& info) {
  if (info.status() == v1::JobInfo::CANCELLED) return absl::CancelledError(info.error());
  return absl::AbortedError(info.error());
}

// A Submit call made again with a request_id its tenant used before: it
// admits nothing, and answers as the job's first call would have from now
// on: the job's id at once, each attempt's JobAccepted (with its ticket),
// progress, then JobDone or the job's failure.
absl::Status FollowSubmitted(const CoordinatorContext& c, const std::string& id, SubmitCall& call) {
  Log(LogLevel::kInfo, "job_followed", {{"job", id}});
  std::atomic<bool> gone{false};
  SubmitCall::EndWatch watch(&call, [&] {
    gone = true;
    c.jobs->Wake();
  });
  uint64_t seen = 0;
  std::string ticket;
  while (!gone) {
    const uint64_t before = seen;
    absl::StatusOr<v1::JobInfo> info =
        c.jobs->WaitForChange(id, &seen, std::chrono::hours(1), &gone, /*with_ticket=*/true);
    if (!info.ok()) return info.status();
    if (seen == before) continue;
    v1::SubmitResponse r;
    *r.mutable_progress() = info->progress();
    r.mutable_progress()->set_job_id(id);
    if (!call.Write(r)) break;
    if (!info->accepted().ticket().empty() && info->accepted().ticket() != ticket) {
      ticket = info->accepted().ticket();
      *r.mutable_accepted() = info->accepted();
      if (!call.Write(r)) break;
    }
    if (info->status() == v1::JobInfo::SUCCEEDED) {
      r.mutable_done()->set_job_id(id);
      *r.mutable_done()->mutable_stats() = info->stats();
      call.Write(r);
      return absl::OkStatus();
    }
    if (info->status() == v1::JobInfo::FAILED || info->status() == v1::JobInfo::CANCELLED) {
      return FollowedEnd(*info);
    }
  }
  return absl::CancelledError("the client went away");
}

absl::Status RunSubmitFlow(const CoordinatorContext& c, const v1::SubmitRequest& request,
                           const std::string& folder, SubmitCall& call) {
  if (request.spec().request_id().size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("JobSpec.request_id has ",
                                                   request.spec().request_id().size(),
                                                   " bytes; at most ", kMaxRequestIdBytes));
  }
  if (std::optional<std::string> known =
          c.jobs->FindRequest(request.spec().tenant(), request.spec().request_id())) {
    return FollowSubmitted(c, *known, call);
  }
  if (request.follow_only()) {
    return absl::NotFoundError(absl::StrCat(
        "no job of request_id '", request.spec().request_id(),
        "' is known here: the coordinator restarted without --state-dir (it forgets its jobs "
        "when it stops), or the job's record is gone"));
  }
  absl::StatusOr<AdmittedJob> job = Admit(c, request, folder);
  if (!job.ok()) return job.status();
  auto machine = std::make_shared<JobMachine>(job->id);
  SetJobCanceller(c, job->id, machine);
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

absl::Status HandleSubmit(const CoordinatorContext& coordinator, const Caller& caller,
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
