// What a worker exports to Prometheus (common/metrics_endpoint.h): its
// shards and query runs by result, their stage times, the bytes it took
// in and gave out, its all-reduce time and how much of it compute hid,
// and, read at each scrape, the shards running and the bytes it retains
// for FetchResult and Query. Names start with `lact_worker_`. Thread-safe.
#ifndef LACT_WORKER_WORKER_METRICS_H_
#define LACT_WORKER_WORKER_METRICS_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>

#include "lact/v1/worker.pb.h"

namespace lact {

class RetainedResults;

class WorkerMetrics {
 public:
  explicit WorkerMetrics(RetainedResults* results);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  void ShardStarted() { running_.Increment(); }
  // A shard ended with `code`; `done` is its statistics when it succeeded.
  void ShardEnded(grpc::StatusCode code, const v1::ShardDone* done);
  void QueryEnded(grpc::StatusCode code);
  // Sets the gauges read from live state (before a scrape).
  void Refresh();

 private:
  RetainedResults* const results_;
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
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_METRICS_H_
