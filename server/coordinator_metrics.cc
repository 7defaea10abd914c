#include "server/coordinator_metrics.h"

#include <map>

#include "common/metric_families.h"
#include "proto/status_conversion.h"
#include "server/job_store.h"
#include "server/worker_registry.h"

namespace lact::server {
namespace {

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
      calls_(CounterFamily(*registry_, "lact_calls_total",
                           "Submit and Query calls by the status code the client got")),
      jobs_ended_(
          CounterFamily(*registry_, "lact_jobs_ended_total", "Jobs that ended, by final status")),
      context_tokens_(OneCounter(*registry_, "lact_context_tokens_total",
                                 "Context tokens of the jobs that succeeded")),
      bytes_(
          CounterFamily(*registry_, "lact_job_bytes_total",
                        "Context bytes in and output bytes out of the jobs that succeeded (they "
                        "move between clients, files and workers, never through the coordinator)")),
      reruns_(OneCounter(*registry_, "lact_job_reruns_total",
                         "Times a job ran again after one of its workers was gone")),
      allreduce_seconds_(OneCounter(*registry_, "lact_allreduce_seconds_total",
                                    "Gradient all-reduce time, summed over workers")),
      allreduce_hidden_seconds_(OneCounter(*registry_, "lact_allreduce_hidden_seconds_total",
                                           "The part of it hidden behind the scans")),
      job_seconds_(
          HistogramFamily(*registry_, "lact_job_seconds", "Jobs that succeeded: accepted to done")
              .Add({}, SecondsBuckets())),
      stage_seconds_(
          HistogramFamily(*registry_, "lact_job_stage_seconds",
                          "Jobs that succeeded, by stage: upload (the last worker holding "
                          "its context), compute (the slowest worker), download")),
      jobs_by_status_(
          GaugeFamily(*registry_, "lact_jobs", "Job records the coordinator holds, by status")),
      workers_by_state_(GaugeFamily(*registry_, "lact_workers",
                                    "Registered workers: healthy, unhealthy or draining")),
      workers_leased_(OneGauge(*registry_, "lact_workers_leased", "Workers a job holds now")),
      retained_states_(OneGauge(*registry_, "lact_retained_states",
                                "Finished jobs whose fused state is kept for Query")) {
  for (const char* stage : {"upload", "compute", "download"})
    stage_seconds_.Add({{"stage", stage}}, SecondsBuckets());
  for (auto s : {v1::JobInfo::QUEUED, v1::JobInfo::RUNNING, v1::JobInfo::SUCCEEDED,
                 v1::JobInfo::FAILED, v1::JobInfo::CANCELLED}) {
    jobs_by_status_.Add({{"status", StatusName(s)}});
  }
  for (const char* state : {"healthy", "unhealthy", "draining"})
    workers_by_state_.Add({{"state", state}});
}

void CoordinatorMetrics::CallEnded(const char* method, absl::StatusCode code) {
  calls_.Add({{"method", method}, {"code", absl::StatusCodeToString(code)}}).Increment();
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
  ObserveStages(stage_seconds_, stats.upload_seconds(), stats.compute_seconds(),
                stats.download_seconds());
}

void CoordinatorMetrics::Refresh() {
  const JobStore::Counts counts = jobs_->Count();
  for (v1::JobInfo::Status s : {v1::JobInfo::QUEUED, v1::JobInfo::RUNNING, v1::JobInfo::SUCCEEDED,
                                v1::JobInfo::FAILED, v1::JobInfo::CANCELLED}) {
    const auto it = counts.by_status.find(s);
    jobs_by_status_.Add({{"status", StatusName(s)}})
        .Set(it == counts.by_status.end() ? 0 : it->second);
  }
  retained_states_.Set(counts.retained_states);
  int healthy = 0, unhealthy = 0, draining = 0, leased = 0;
  for (const WorkerRegistry::Listed& w : workers_->Workers()) {
    draining += w.entry.leaving ? 1 : 0;
    healthy += !w.entry.leaving && w.healthy ? 1 : 0;
    unhealthy += !w.entry.leaving && !w.healthy ? 1 : 0;
    leased += w.entry.busy() ? 1 : 0;
  }
  workers_by_state_.Add({{"state", "healthy"}}).Set(healthy);
  workers_by_state_.Add({{"state", "unhealthy"}}).Set(unhealthy);
  workers_by_state_.Add({{"state", "draining"}}).Set(draining);
  workers_leased_.Set(leased);
}

}  // namespace lact::server
