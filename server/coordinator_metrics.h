// What the coordinator exports to Prometheus (common/metrics_endpoint.h):
// counters and histograms the Submit and Query flows update as calls and
// jobs end, and gauges read from the job store and the worker registry
// at each scrape (Refresh). Names start with `lact_`; seconds and bytes
// are in their base units. Thread-safe.
#ifndef LACT_SERVER_COORDINATOR_METRICS_H_
#define LACT_SERVER_COORDINATOR_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "lact/v1/coordinator.pb.h"

namespace lact::server {

class JobStore;
class WorkerRegistry;

class CoordinatorMetrics {
 public:
  CoordinatorMetrics(const JobStore* jobs, const WorkerRegistry* registry);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // A Submit or Query call ended with `code` (refusals included: every
  // status a client got).
  void CallEnded(const char* method, absl::StatusCode code);
  // A job ended: its status, its statistics, and the bytes of its context
  // and outputs (in band or by reference).
  void JobEnded(v1::JobInfo::Status status, const v1::JobStats& stats, int64_t context_tokens,
                int64_t context_bytes, int64_t output_bytes);
  // Sets the gauges from the job store and the registry (before a scrape).
  void Refresh();

 private:
  const JobStore* const jobs_;
  const WorkerRegistry* const workers_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Counter>& jobs_ended_;
  prometheus::Counter& context_tokens_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Counter& reruns_;
  prometheus::Counter& allreduce_seconds_;
  prometheus::Counter& allreduce_hidden_seconds_;
  prometheus::Histogram& job_seconds_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Family<prometheus::Gauge>& jobs_by_status_;
  prometheus::Family<prometheus::Gauge>& workers_by_state_;
  prometheus::Gauge& workers_leased_;
  prometheus::Gauge& retained_states_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_COORDINATOR_METRICS_H_
