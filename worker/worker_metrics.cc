#include "worker/worker_metrics.h"

#include "common/metric_families.h"
#include "common/peak_rss.h"
#include "proto/status_conversion.h"
#include "worker/data_plane/compute_line.h"
#include "worker/data_plane/retained_results.h"

namespace lact {
WorkerMetrics::WorkerMetrics(RetainedResults* results, const ComputeLine* line,
                             std::function<std::optional<DeviceMemoryBytes>()> device_memory)
    : results_(results),
      line_(line),
      shards_(CounterFamily(*registry_, "lact_worker_shards_total",
                            "Shards this worker ran, by the status code it ended with")),
      queries_(CounterFamily(*registry_, "lact_worker_query_runs_total",
                             "Query runs against a retained state, by status code")),
      stage_seconds_(
          HistogramFamily(*registry_, "lact_worker_shard_stage_seconds",
                          "Shards that succeeded, by stage: upload (to every context row "
                          "in hand), compute, download (to outputs delivered)")),
      bytes_(CounterFamily(*registry_, "lact_worker_bytes_total",
                           "Context bytes in (received or read) and output bytes out (sent or "
                           "written) of the shards that succeeded")),
      compute_seconds_(OneCounter(*registry_, "lact_worker_compute_seconds_total",
                                  "Compute time of the shards that succeeded")),
      allreduce_seconds_(OneCounter(*registry_, "lact_worker_allreduce_seconds_total",
                                    "Gradient all-reduce time (hidden or not)")),
      allreduce_waited_seconds_(OneCounter(*registry_, "lact_worker_allreduce_waited_seconds_total",
                                           "The part of it compute waited for (not hidden)")),
      running_(OneGauge(*registry_, "lact_worker_shards_running", "Shards running now")),
      retained_bytes_(OneGauge(*registry_, "lact_worker_retained_bytes",
                               "Results and fused states kept for FetchResult and Query")),
      peak_rss_bytes_(OneGauge(*registry_, "lact_worker_peak_rss_bytes",
                               "Peak resident memory of this process")),
      staged_bytes_(OneGauge(*registry_, "lact_worker_staged_bytes",
                             "Tokens (decoded) taken for shards waiting for their turn")),
      staged_peak_bytes_(OneGauge(*registry_, "lact_worker_staged_bytes_peak",
                                  "The most bytes staged at once (at most --staging-bytes)")),
      idle_seconds_(OneCounter(*registry_, "lact_worker_compute_idle_seconds_total",
                               "Time the compute stood idle between one shard and the next")),
      device_memory_(std::move(device_memory)) {
  if (device_memory_) {
    gpu_used_bytes_ = &OneGauge(*registry_, "lact_worker_gpu_memory_used_bytes",
                                "Memory in use on this worker's GPU, by every process on it");
    gpu_total_bytes_ =
        &OneGauge(*registry_, "lact_worker_gpu_memory_total_bytes", "This worker's GPU's memory");
  }
  for (const char* stage : {"upload", "compute", "download"})
    stage_seconds_.Add({{"stage", stage}}, SecondsBuckets());
  for (const char* direction : {"in", "out"}) bytes_.Add({{"direction", direction}});
}

void WorkerMetrics::ShardEnded(absl::StatusCode code, const v1::ShardDone* done) {
  running_.Decrement();
  shards_.Add({{"code", absl::StatusCodeToString(code)}}).Increment();
  if (done == nullptr) return;
  ObserveStages(stage_seconds_, done->upload_seconds(), done->compute_seconds(),
                done->download_seconds());
  bytes_.Add({{"direction", "in"}}).Increment(static_cast<double>(done->context_bytes()));
  bytes_.Add({{"direction", "out"}}).Increment(static_cast<double>(done->output_bytes()));
  compute_seconds_.Increment(done->compute_seconds());
  idle_seconds_.Increment(done->idle_before_seconds());
  allreduce_seconds_.Increment(done->allreduce_seconds());
  allreduce_waited_seconds_.Increment(done->allreduce_waited_seconds());
}

void WorkerMetrics::QueryEnded(absl::StatusCode code) {
  queries_.Add({{"code", absl::StatusCodeToString(code)}}).Increment();
}

void WorkerMetrics::Refresh() {
  if (results_ != nullptr) retained_bytes_.Set(static_cast<double>(results_->bytes()));
  peak_rss_bytes_.Set(static_cast<double>(PeakRssBytes()));
  if (line_ != nullptr) {
    staged_bytes_.Set(static_cast<double>(line_->staged_bytes()));
    staged_peak_bytes_.Set(static_cast<double>(line_->peak_staged_bytes()));
  }
  if (!device_memory_) return;
  if (std::optional<DeviceMemoryBytes> memory = device_memory_()) {
    gpu_used_bytes_->Set(static_cast<double>(memory->used));
    gpu_total_bytes_->Set(static_cast<double>(memory->total));
  }
}

}  // namespace lact
