// The workers the coordinator knows: their address, backend, models and
// heartbeats. A worker silent for 3 heartbeat intervals, or reported failed
// by a job, is unhealthy until its next heartbeat. A worker is leased to
// one job, and, if it stages (it registered staging bytes), to one more
// behind it: the next job's bytes reach the worker while the first
// computes. The second lease is given only once the first job's shard is
// in line on the worker (InLine), so every worker holds its two jobs in
// the order they were leased, and no two jobs wait on each other's
// collectives. Thread-safe.
#ifndef LACT_SERVER_WORKER_REGISTRY_H_
#define LACT_SERVER_WORKER_REGISTRY_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/model.h"
#include "proto/auth.h"
#include "server/fair_line.h"

namespace lact::server {

// A job's hold on a worker.
struct JobLease {
  std::string job;
  bool in_line = false;  // the job's shard took its place in the worker's line
};

struct WorkerEntry {
  std::string id;
  std::string address;
  std::string backend;
  std::map<std::string, ModelConfig> models;  // by ModelKey
  std::string metrics_address;                // its Prometheus endpoint, if any
  std::chrono::steady_clock::time_point last_seen;
  bool healthy = true;
  bool stages = false;           // takes a second job's bytes while it computes
  std::vector<JobLease> leases;  // the computing job's first
  bool busy() const { return !leases.empty(); }
  bool leaving = false;  // deregistered: never healthy again at this address until it registers
};

struct ModelEntry {
  std::string name;
  ModelConfig config;
  int workers = 0;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(std::chrono::milliseconds heartbeat_interval, size_t max_workers = 10000)
      : interval_(heartbeat_interval), max_workers_(max_workers) {}

  // Registers (or re-registers, by address) a worker; returns its id. A
  // new address at `max_workers` entries first drops those of workers
  // silent for 3 heartbeat intervals and not leased; RESOURCE_EXHAUSTED
  // (naming --max-workers) if none are.
  absl::StatusOr<std::string> Register(const std::string& address, const std::string& backend,
                                       std::map<std::string, ModelConfig> models,
                                       const std::string& metrics_address = "",
                                       bool stages = false);
  // False if the id is unknown (the worker should register again).
  bool Heartbeat(const std::string& id);
  void MarkFailed(const std::string& address);
  // The worker with this id is leaving: it is leased no more (its leases
  // run on) until a worker registers at its address again.
  void Deregister(const std::string& id);

  // The config of `model` as the healthy workers hold it; NOT_FOUND naming
  // the available models otherwise.
  absl::StatusOr<ModelConfig> FindModel(const std::string& model) const;
  std::vector<ModelEntry> Models() const;
  // Every worker known, by address, each with whether it is healthy now.
  struct Listed {
    WorkerEntry entry;
    bool healthy;
  };
  std::vector<Listed> Workers() const;
  // Healthy workers holding `model` (busy or not).
  int CountHolding(const std::string& model) const;

  // How a caller of Acquire waits in line.
  struct Wait {
    std::chrono::milliseconds limit{0};  // longest time in line
    int max_waiting = 64;                // callers in line beyond which one is refused at once
    // Looked at whenever the line moves or WakeWaiters() is called (no
    // timer): true leaves the line (CANCELLED).
    std::function<bool()> cancelled;
    std::function<void(int)> on_position;  // the caller's place in line (1 = next) when it changes
    std::string tenant;  // whose job; the line is fair across tenants (fair_line.h)
    std::string job;     // the job the lease is for (Release, InLine)
  };

  // Leases `count` healthy workers holding `model`, in the line's order
  // (first come first served within a tenant, round robin across
  // tenants): a caller waits behind every one ahead of it (so a job asking
  // for many workers is not overtaken by later small ones) until the
  // workers are free: idle ones, or else workers that stage whose one job,
  // the same on all of them, is in line there (never some of each, so that
  // the job's ranks start together). RESOURCE_EXHAUSTED at once when `max_waiting` callers
  // already wait (naming the line's size), or after `limit` in line.
  absl::StatusOr<std::vector<std::string>> Acquire(const std::string& model, int count,
                                                   const Wait& wait);
  absl::StatusOr<std::vector<std::string>> Acquire(const std::string& model, int count,
                                                   std::chrono::milliseconds limit) {
    return Acquire(model, count, Wait{limit});
  }
  // Ends `job`'s leases of `addresses` (with no job named, each worker's
  // first).
  void Release(const std::vector<std::string>& addresses, const std::string& job = "");
  // Leases `addresses` to `job` as they are, registered or not (a job taken
  // back after a restart holds the workers its shards run on, in line
  // there already); Release returns them.
  void Claim(const std::vector<std::string>& addresses, const std::string& job = "");
  // `job`'s shard took its place in the line of the worker at `address`.
  void InLine(const std::string& address, const std::string& job);
  // Makes every waiting Acquire look at its `cancelled` again: the caller
  // whose answer has turned true calls it.
  void WakeWaiters() ABSL_LOCKS_EXCLUDED(mu_);

  std::chrono::milliseconds heartbeat_interval() const { return interval_; }

 private:
  bool HealthyLocked(const WorkerEntry& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills `picked` with the workers `count` leases of `model` may take now
  // (idle, else behind one job); true when there are enough.
  bool PickLocked(const std::string& key, int count, const std::string& job,
                  std::vector<std::string>* picked) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::chrono::milliseconds interval_;
  const size_t max_workers_;
  mutable absl::Mutex mu_;
  absl::CondVar released_;  // signalled when workers free up or come back
  std::map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);  // by address
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // In every id, so that a restarted coordinator never hands a worker an id
  // another worker still heartbeats with from before the restart (it would
  // be taken as known, and never register again).
  const std::string incarnation_ = RandomHex(4);
  FairLine line_ ABSL_GUARDED_BY(mu_);  // the Acquire callers waiting
};

}  // namespace lact::server

#endif  // LACT_SERVER_WORKER_REGISTRY_H_
