#include "worker/worker_metrics.h"

#include "absl/status/status.h"
#include "common/peak_rss.h"
#include "worker/retained_results.h"

namespace lact {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000};
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace

WorkerMetrics::WorkerMetrics(RetainedResults* results)
    : results_(results),
      shards_(BuildCounter()
                  .Name("lact_worker_shards_total")
                  .Help("Shards this worker ran, by the status code it ended with")
                  .Register(*registry_)),
      queries_(BuildCounter()
                   .Name("lact_worker_query_runs_total")
                   .Help("Query runs against a retained state, by status code")
                   .Register(*registry_)),
      stage_seconds_(BuildHistogram()
                         .Name("lact_worker_shard_stage_seconds")
                         .Help("Shards that succeeded, by stage: upload (to every context row "
                               "in hand), compute, download (to outputs delivered)")
                         .Register(*registry_)),
      bytes_(BuildCounter()
                 .Name("lact_worker_bytes_total")
                 .Help("Context bytes in (received or read) and output bytes out (sent or "
                       "written) of the shards that succeeded")
                 .Register(*registry_)),
      compute_seconds_(BuildCounter()
                           .Name("lact_worker_compute_seconds_total")
                           .Help("Compute time of the shards that succeeded")
                           .Register(*registry_)
                           .Add({})),
      allreduce_seconds_(BuildCounter()
                             .Name("lact_worker_allreduce_seconds_total")
                             .Help("Gradient all-reduce time (hidden or not)")
                             .Register(*registry_)
                             .Add({})),
      allreduce_waited_seconds_(BuildCounter()
                                    .Name("lact_worker_allreduce_waited_seconds_total")
                                    .Help("The part of it compute waited for (not hidden)")
                                    .Register(*registry_)
                                    .Add({})),
      running_(BuildGauge()
                   .Name("lact_worker_shards_running")
                   .Help("Shards running now")
                   .Register(*registry_)
                   .Add({})),
      retained_bytes_(BuildGauge()
                          .Name("lact_worker_retained_bytes")
                          .Help("Results and fused states kept for FetchResult and Query")
                          .Register(*registry_)
                          .Add({})),
      peak_rss_bytes_(BuildGauge()
                          .Name("lact_worker_peak_rss_bytes")
                          .Help("Peak resident memory of this process")
                          .Register(*registry_)
                          .Add({})) {
  for (const char* stage : {"upload", "compute", "download"})
    stage_seconds_.Add({{"stage", stage}}, SecondsBuckets());
  for (const char* direction : {"in", "out"}) bytes_.Add({{"direction", direction}});
}

void WorkerMetrics::ShardEnded(grpc::StatusCode code, const v1::ShardDone* done) {
  running_.Decrement();
  shards_.Add({{"code", CodeName(code)}}).Increment();
  if (done == nullptr) return;
  stage_seconds_.Add({{"stage", "upload"}}, SecondsBuckets()).Observe(done->upload_seconds());
  stage_seconds_.Add({{"stage", "compute"}}, SecondsBuckets()).Observe(done->compute_seconds());
  stage_seconds_.Add({{"stage", "download"}}, SecondsBuckets()).Observe(done->download_seconds());
  bytes_.Add({{"direction", "in"}}).Increment(static_cast<double>(done->context_bytes()));
  bytes_.Add({{"direction", "out"}}).Increment(static_cast<double>(done->output_bytes()));
  compute_seconds_.Increment(done->compute_seconds());
  allreduce_seconds_.Increment(done->allreduce_seconds());
  allreduce_waited_seconds_.Increment(done->allreduce_waited_seconds());
}

void WorkerMetrics::QueryEnded(grpc::StatusCode code) {
  queries_.Add({{"code", CodeName(code)}}).Increment();
}

void WorkerMetrics::Refresh() {
  if (results_ != nullptr) retained_bytes_.Set(static_cast<double>(results_->bytes()));
  peak_rss_bytes_.Set(static_cast<double>(PeakRssBytes()));
}

}  // namespace lact
