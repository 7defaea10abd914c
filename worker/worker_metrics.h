// What a worker exports to Prometheus (common/metrics_endpoint.h): its
// shards and query runs by result, their stage times, the bytes it took
// in and gave out, its all-reduce time and how much of it compute hid,
// and, read at each scrape, the shards running and the bytes it retains
// for FetchResult and Query, the bytes staged for shards waiting for their
// turn (now and at most), and a CUDA worker's device memory. Names start
// with `lact_worker_`. Thread-safe.
#ifndef LACT_WORKER_WORKER_METRICS_H_
#define LACT_WORKER_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "lact/v1/worker.pb.h"
#include "worker/backends.h"

namespace lact {

class ComputeLine;
class RetainedResults;

class WorkerMetrics {
 public:
  // `device_memory`: a CUDA worker's (lact_worker_gpu_memory_{used,total}_bytes);
  // null for a CPU worker, which exports no GPU gauges.
  // `line`: the shards' compute line, whose staged bytes are exported.
  WorkerMetrics(RetainedResults* results, const ComputeLine* line,
                std::function<std::optional<DeviceMemoryBytes>()> device_memory = nullptr);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  void ShardStarted() { running_.Increment(); }
  // A shard ended with `code`; `done` is its statistics when it succeeded.
  void ShardEnded(absl::StatusCode code, const v1::ShardDone* done);
  void QueryEnded(absl::StatusCode code);
  // Sets the gauges read from live state (before a scrape).
  void Refresh();

 private:
  RetainedResults* const results_;
  const ComputeLine* const line_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& shards_;
  prometheus::Family<prometheus::Counter>& queries_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Counter& compute_seconds_;
  prometheus::Counter& allreduce_seconds_;
  prometheus::Counter& allreduce_waited_seconds_;
  prometheus::Gauge& running_;
  prometheus::Gauge& retained_bytes_;
  prometheus::Gauge& peak_rss_bytes_;
  prometheus::Gauge& staged_bytes_;
  prometheus::Gauge& staged_peak_bytes_;
  prometheus::Counter& idle_seconds_;
  const std::function<std::optional<DeviceMemoryBytes>()> device_memory_;
  prometheus::Gauge* gpu_used_bytes_ = nullptr;   // with device_memory_
  prometheus::Gauge* gpu_total_bytes_ = nullptr;  // with device_memory_
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_METRICS_H_
