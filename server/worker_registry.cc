#include "server/worker_registry.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lact::server {

absl::StatusOr<std::string> WorkerRegistry::Register(const std::string& address,
                                                     const std::string& backend,
                                                     std::map<std::string, ModelConfig> models,
                                                     const std::string& metrics_address,
                                                     bool stages) {
  absl::MutexLock lock(&mu_);
  if (workers_.count(address) == 0 && workers_.size() >= max_workers_) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      const bool silent = std::chrono::steady_clock::now() - it->second.last_seen > 3 * interval_;
      it = silent && !it->second.busy() ? workers_.erase(it) : std::next(it);
    }
    if (workers_.size() >= max_workers_) {
      return absl::ResourceExhaustedError(absl::StrCat("the coordinator knows ", workers_.size(),
                                                       " live workers, its limit (--max-workers)"));
    }
  }
  WorkerEntry& w = workers_[address];
  w.id = absl::StrCat("w", next_id_++, "-", incarnation_);
  w.address = address;
  w.backend = backend;
  w.models = std::move(models);
  w.metrics_address = metrics_address;
  w.stages = stages;
  w.last_seen = std::chrono::steady_clock::now();
  w.healthy = true;  // `leases` are kept: jobs may still hold this address
  w.leaving = false;
  released_.SignalAll();
  return w.id;
}

bool WorkerRegistry::Heartbeat(const std::string& id) {
  absl::MutexLock lock(&mu_);
  for (auto& [address, w] : workers_) {
    if (w.id == id) {
      if (w.leaving) return true;  // a late heartbeat does not bring it back
      const bool was_usable = HealthyLocked(w);
      w.last_seen = std::chrono::steady_clock::now();
      w.healthy = true;
      if (!was_usable) released_.SignalAll();  // it was stale: waiting Acquire()s look again
      return true;
    }
  }
  return false;
}

void WorkerRegistry::Deregister(const std::string& id) {
  absl::MutexLock lock(&mu_);
  for (auto& [address, w] : workers_) {
    if (w.id == id) {
      w.leaving = true;
      w.healthy = false;
    }
  }
}

void WorkerRegistry::MarkFailed(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = workers_.find(address); it != workers_.end()) it->second.healthy = false;
}

bool WorkerRegistry::HealthyLocked(const WorkerEntry& w) const {
  return w.healthy && std::chrono::steady_clock::now() - w.last_seen < 3 * interval_;
}

absl::StatusOr<ModelConfig> WorkerRegistry::FindModel(const std::string& model) const {
  const std::string key = ModelKey(model);
  absl::MutexLock lock(&mu_);
  std::set<std::string> names;
  for (const auto& [address, w] : workers_) {
    if (!HealthyLocked(w)) continue;
    if (auto it = w.models.find(key); it != w.models.end()) return it->second;
    for (const auto& [name, config] : w.models) names.insert(name);
  }
  if (names.empty()) return absl::UnavailableError("no healthy worker is registered");
  return absl::NotFoundError(absl::StrCat("unknown model '", model,
                                          "' (available: ", absl::StrJoin(names, ", "),
                                          "; presets take an optional :SEED)"));
}

std::vector<ModelEntry> WorkerRegistry::Models() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, ModelEntry> models;
  for (const auto& [address, w] : workers_) {
    if (!HealthyLocked(w)) continue;
    for (const auto& [name, config] : w.models) {
      ModelEntry& e = models[name];
      e.name = name;
      e.config = config;
      ++e.workers;
    }
  }
  std::vector<ModelEntry> out;
  for (auto& [name, e] : models) out.push_back(e);
  return out;
}

std::vector<WorkerRegistry::Listed> WorkerRegistry::Workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<Listed> out;
  for (const auto& [address, w] : workers_) out.push_back({w, HealthyLocked(w)});
  return out;
}

int WorkerRegistry::CountHolding(const std::string& model) const {
  const std::string key = ModelKey(model);
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [address, w] : workers_) n += HealthyLocked(w) && w.models.count(key) ? 1 : 0;
  return n;
}

absl::StatusOr<std::vector<std::string>> WorkerRegistry::Acquire(const std::string& model,
                                                                 int count, const Wait& wait) {
  const std::string key = ModelKey(model);
  absl::MutexLock lock(&mu_);
  if (line_.size() >= wait.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue is full: ", line_.size(),
                                                     " jobs already wait for workers (at most ",
                                                     wait.max_waiting, "); retry later"));
  }
  const uint64_t ticket = line_.Join(wait.tenant);
  std::vector<std::string> picked;
  const auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return PickLocked(key, count, wait.job, &picked);
  };
  const auto leave = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    line_.Leave(ticket);
    released_.SignalAll();  // the ones behind move up
  };
  const auto deadline = std::chrono::steady_clock::now() + wait.limit;
  int reported = 0;
  while (true) {
    const int position = line_.Position(ticket);
    if (position == 1 && idle()) break;
    if (position != reported && wait.on_position) {
      reported = position;
      mu_.Unlock();  // the callback writes to the client's stream
      wait.on_position(position);
      mu_.Lock();
      continue;
    }
    if (wait.cancelled && wait.cancelled()) {
      leave();
      return absl::CancelledError(
          "the job left the queue: it was cancelled while it waited for workers");
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      idle();
      leave();
      return absl::ResourceExhaustedError(absl::StrCat(
          "waited ", wait.limit.count(), " ms in line for ", count, " free workers holding '",
          model, "'; ", picked.size(), " are free now; retry later or ask for fewer"));
    }
    released_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - now));
  }
  picked.resize(count);
  for (const std::string& a : picked) workers_[a].leases.push_back({wait.job, false});
  line_.Served(ticket);
  released_.SignalAll();
  return picked;
}

void WorkerRegistry::WakeWaiters() {
  absl::MutexLock lock(&mu_);
  released_.SignalAll();
}

bool WorkerRegistry::PickLocked(const std::string& key, int count, const std::string& job,
                                std::vector<std::string>* picked) const {
  picked->clear();
  // Staging workers whose one job is in line there, by that job: a job
  // staged on workers behind one and the same job starts on all of them as
  // that job ends, so its ranks meet at once, never one waiting out the
  // collective timeout for another still busy.
  std::map<std::string, std::vector<std::string>> behind;
  for (const auto& [address, w] : workers_) {
    if (!HealthyLocked(w) || !w.models.count(key)) continue;
    if (w.leases.empty()) {
      picked->push_back(address);
    } else if (w.stages && w.leases.size() == 1 && w.leases[0].in_line && w.leases[0].job != job) {
      behind[w.leases[0].job].push_back(address);
    }
  }
  if (static_cast<int>(picked->size()) >= count) return true;
  for (const auto& [front, addresses] : behind) {
    if (static_cast<int>(addresses.size()) >= count) {
      *picked = addresses;
      return true;
    }
  }
  return false;
}

void WorkerRegistry::Claim(const std::vector<std::string>& addresses, const std::string& job) {
  absl::MutexLock lock(&mu_);
  for (const std::string& a : addresses) {
    WorkerEntry& w = workers_[a];
    w.address = a;
    w.leases.push_back({job, true});
  }
}

void WorkerRegistry::Release(const std::vector<std::string>& addresses, const std::string& job) {
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& a : addresses) {
      auto it = workers_.find(a);
      if (it == workers_.end()) continue;
      std::vector<JobLease>& leases = it->second.leases;
      auto lease = std::find_if(leases.begin(), leases.end(),
                                [&job](const JobLease& l) { return l.job == job; });
      if (lease == leases.end() && job.empty()) lease = leases.begin();
      if (lease != leases.end()) leases.erase(lease);
    }
  }
  released_.SignalAll();
}

void WorkerRegistry::InLine(const std::string& address, const std::string& job) {
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(address);
    if (it == workers_.end()) return;
    for (JobLease& lease : it->second.leases) lease.in_line |= lease.job == job;
  }
  released_.SignalAll();
}

}  // namespace lact::server
