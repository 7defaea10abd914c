#include "server/coordinator_metrics.h"

#include <map>

#include "absl/status/status.h"
#include "server/job_store.h"
#include "server/worker_registry.h"

namespace lact::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// Seconds from 10 ms to about 3 hours, by factors of about 3.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000};
}

const char* StatusName(v1::JobInfo::Status s) {
  switch (s) {
    case v1::JobInfo::QUEUED:
      return "queued";
    case v1::JobInfo::RUNNING:
      return "running";
    case v1::JobInfo::SUCCEEDED:
      return "succeeded";
    case v1::JobInfo::FAILED:
      return "failed";
    case v1::JobInfo::CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(const JobStore* jobs, const WorkerRegistry* registry)
    : jobs_(jobs),
      workers_(registry),
      calls_(BuildCounter()
                 .Name("lact_calls_total")
                 .Help("Submit and Query calls by the status code the client got")
                 .Register(*registry_)),
      jobs_ended_(BuildCounter()
                      .Name("lact_jobs_ended_total")
                      .Help("Jobs that ended, by final status")
                      .Register(*registry_)),
      context_tokens_(BuildCounter()
                          .Name("lact_context_tokens_total")
                          .Help("Context tokens of the jobs that succeeded")
                          .Register(*registry_)
                          .Add({})),
      bytes_(BuildCounter()
                 .Name("lact_job_bytes_total")
                 .Help("Context bytes in and output bytes out of the jobs that succeeded (they "
                       "move between clients, files and workers, never through the coordinator)")
                 .Register(*registry_)),
      reruns_(BuildCounter()
                  .Name("lact_job_reruns_total")
                  .Help("Times a job ran again after one of its workers was gone")
                  .Register(*registry_)
                  .Add({})),
      allreduce_seconds_(BuildCounter()
                             .Name("lact_allreduce_seconds_total")
                             .Help("Gradient all-reduce time, summed over workers")
                             .Register(*registry_)
                             .Add({})),
      allreduce_hidden_seconds_(BuildCounter()
                                    .Name("lact_allreduce_hidden_seconds_total")
                                    .Help("The part of it hidden behind the scans")
                                    .Register(*registry_)
                                    .Add({})),
      job_seconds_(BuildHistogram()
                       .Name("lact_job_seconds")
                       .Help("Jobs that succeeded: accepted to done")
                       .Register(*registry_)
                       .Add({}, SecondsBuckets())),
      stage_seconds_(BuildHistogram()
                         .Name("lact_job_stage_seconds")
                         .Help("Jobs that succeeded, by stage: upload (the last worker holding "
                               "its context), compute (the slowest worker), download")
                         .Register(*registry_)),
      jobs_by_status_(BuildGauge()
                          .Name("lact_jobs")
                          .Help("Job records the coordinator holds, by status")
                          .Register(*registry_)),
      workers_by_state_(BuildGauge()
                            .Name("lact_workers")
                            .Help("Registered workers: healthy, unhealthy or draining")
                            .Register(*registry_)),
      workers_leased_(BuildGauge()
                          .Name("lact_workers_leased")
                          .Help("Workers a job holds now")
                          .Register(*registry_)
                          .Add({})),
      retained_states_(BuildGauge()
                           .Name("lact_retained_states")
                           .Help("Finished jobs whose fused state is kept for Query")
                           .Register(*registry_)
                           .Add({})) {
  for (const char* stage : {"upload", "compute", "download"})
    stage_seconds_.Add({{"stage", stage}}, SecondsBuckets());
  for (auto s : {v1::JobInfo::QUEUED, v1::JobInfo::RUNNING, v1::JobInfo::SUCCEEDED,
                 v1::JobInfo::FAILED, v1::JobInfo::CANCELLED}) {
    jobs_by_status_.Add({{"status", StatusName(s)}});
  }
  for (const char* state : {"healthy", "unhealthy", "draining"})
    workers_by_state_.Add({{"state", state}});
}

void CoordinatorMetrics::CallEnded(const char* method, grpc::StatusCode code) {
  calls_
      .Add({{"method", method},
            {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}})
      .Increment();
}

void CoordinatorMetrics::JobEnded(v1::JobInfo::Status status, const v1::JobStats& stats,
                                  int64_t context_tokens, int64_t context_bytes,
                                  int64_t output_bytes) {
  jobs_ended_.Add({{"status", StatusName(status)}}).Increment();
  reruns_.Increment(stats.reruns());
  if (status != v1::JobInfo::SUCCEEDED) return;
  context_tokens_.Increment(static_cast<double>(context_tokens));
  bytes_.Add({{"direction", "in"}}).Increment(static_cast<double>(context_bytes));
  bytes_.Add({{"direction", "out"}}).Increment(static_cast<double>(output_bytes));
  allreduce_seconds_.Increment(stats.allreduce_seconds());
  allreduce_hidden_seconds_.Increment(stats.allreduce_seconds() *
                                      stats.allreduce_hidden_fraction());
  job_seconds_.Observe(stats.seconds());
  stage_seconds_.Add({{"stage", "upload"}}, SecondsBuckets()).Observe(stats.upload_seconds());
  stage_seconds_.Add({{"stage", "compute"}}, SecondsBuckets()).Observe(stats.compute_seconds());
  stage_seconds_.Add({{"stage", "download"}}, SecondsBuckets()).Observe(stats.download_seconds());
}

void CoordinatorMetrics::Refresh() {
  std::map<std::string, int> by_status = {
      {"queued", 0}, {"running", 0}, {"succeeded", 0}, {"failed", 0}, {"cancelled", 0}};
  int retained = 0;
  for (const v1::JobInfo& info : jobs_->List()) {
    ++by_status[StatusName(info.status())];
    retained += info.state_retained() ? 1 : 0;
  }
  for (const auto& [status, n] : by_status) jobs_by_status_.Add({{"status", status}}).Set(n);
  retained_states_.Set(retained);
  int healthy = 0, unhealthy = 0, draining = 0, leased = 0;
  for (const WorkerRegistry::Listed& w : workers_->Workers()) {
    draining += w.entry.leaving ? 1 : 0;
    healthy += !w.entry.leaving && w.healthy ? 1 : 0;
    unhealthy += !w.entry.leaving && !w.healthy ? 1 : 0;
    leased += w.entry.busy ? 1 : 0;
  }
  workers_by_state_.Add({{"state", "healthy"}}).Set(healthy);
  workers_by_state_.Add({{"state", "unhealthy"}}).Set(unhealthy);
  workers_by_state_.Add({{"state", "draining"}}).Set(draining);
  workers_leased_.Set(leased);
}

}  // namespace lact::server
