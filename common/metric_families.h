// Short forms of prometheus-cpp's builders for the servers' metrics
// (server/coordinator_metrics.h, worker/worker_metrics.h): a family, or the
// one unlabelled series of a family, registered in `registry` under `name`
// with its help text. The references live as long as the registry.
#ifndef LACT_COMMON_METRIC_FAMILIES_H_
#define LACT_COMMON_METRIC_FAMILIES_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

namespace lact {

inline prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& registry,
                                                              const std::string& name,
                                                              const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}
inline prometheus::Counter& OneCounter(prometheus::Registry& registry, const std::string& name,
                                       const std::string& help) {
  return CounterFamily(registry, name, help).Add({});
}
inline prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry,
                                                          const std::string& name,
                                                          const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}
inline prometheus::Gauge& OneGauge(prometheus::Registry& registry, const std::string& name,
                                   const std::string& help) {
  return GaugeFamily(registry, name, help).Add({});
}
inline prometheus::Family<prometheus::Histogram>& HistogramFamily(prometheus::Registry& registry,
                                                                  const std::string& name,
                                                                  const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

// Seconds from 10 ms to about 3 hours, by factors of about 3: the buckets
// of every duration histogram.
inline prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000};
}

// One sample each of a job's (or shard's) upload, compute and download
// seconds, in a family labelled by stage.
inline void ObserveStages(prometheus::Family<prometheus::Histogram>& stages, double upload,
                          double compute, double download) {
  stages.Add({{"stage", "upload"}}, SecondsBuckets()).Observe(upload);
  stages.Add({{"stage", "compute"}}, SecondsBuckets()).Observe(compute);
  stages.Add({{"stage", "download"}}, SecondsBuckets()).Observe(download);
}

}  // namespace lact

#endif  // LACT_COMMON_METRIC_FAMILIES_H_
