// A coordinator and N workers as child processes on 127.0.0.1: what
// `lact local` runs and what the end-to-end tests start. Start() returns
// once the coordinator listens and every worker has registered; the
// destructor stops them (SIGTERM, then SIGKILL after 10 s) and reaps them.
// The cluster's Control service has a port of its own and a secret made
// for this cluster (in a folder only this user can open, removed with the
// cluster); the public port is open, as loopback allows (pass
// --auth-tokens in coordinator_args to require tokens), and plaintext
// unless `tls` is set.
#ifndef LACT_CLIENT_LOCAL_CLUSTER_H_
#define LACT_CLIENT_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lact_client.h"

namespace lact {

struct LocalClusterOptions {
  int workers = 2;
  int port = 0;  // coordinator port, 0 = any free one
  std::string model_dir;
  // Folder the coordinator and workers may read and write files by
  // reference in (--data-root); empty = none.
  std::string data_root;
  int threads_per_worker = 0;  // 0: cores / workers, at least 1
  std::string bin_dir;  // where lact-coordinator and lact-worker are; "" = next to this program
  std::vector<std::string> coordinator_args;  // extra flags
  // The bearer token the cluster's start-up check presents, when
  // coordinator_args require tokens (--auth-tokens).
  std::string token;
  // TLS on every port, with a CA and a certificate for 127.0.0.1 made for
  // this cluster (local_credentials.h); clients trust it through security().
  bool tls = false;
  // In-band contexts spooled in the cluster's folder (--spool-dir), so a
  // job whose worker dies runs again.
  bool spool = true;
  std::vector<std::string> worker_args;  // extra flags for every worker (e.g. --backend cuda)
  // Every process serves Prometheus metrics on a port of its own (--metrics-port 0).
  bool metrics = true;
  // CUDA devices the workers take in turn (worker i: devices[i % size]);
  // empty: no --device flag.
  std::vector<int> devices;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  const std::string& address() const { return address_; }
  // The coordinator's Control service (workers only; the cluster secret).
  const std::string& control_address() const { return control_address_; }
  // The coordinator's Prometheus endpoint (host:port; with `metrics`).
  const std::string& metrics_address() const { return metrics_address_; }
  // What a client of this cluster presents and trusts: the token given,
  // and with `tls` the cluster's CA.
  const ClientSecurity& security() const { return security_; }
  // With `tls`, the PEM file of the cluster's CA (for lact --tls-ca).
  const std::string& tls_ca_file() const { return tls_ca_file_; }
  pid_t coordinator_pid() const { return coordinator_; }
  pid_t worker_pid(int i) const { return workers_[i]; }
  // SIGKILLs worker i (fault injection) and reaps it.
  void KillWorker(int i);
  // Starts worker i again (killing it first if it runs), with the flags it
  // had; returns once it has registered (at once, with
  // `await_registration` false: its coordinator may be down).
  absl::Status RestartWorker(int i, bool await_registration = true);
  // Kills the coordinator (SIGKILL, as a crash would) and starts it again
  // with the same flags on the same ports; returns once every worker has
  // registered with it again.
  absl::Status RestartCoordinator();
  // The two halves of that: SIGKILL and reap; start again (once it has
  // exited, by a kill or a signal it got) and await every worker.
  void KillCoordinator();
  absl::Status StartCoordinatorAgain();
  // Sends worker i `signal` (SIGSTOP and SIGCONT to stall it and let it go).
  void SignalWorker(int i, int signal);
  void SignalCoordinator(int signal);
  // Whether worker i (or the coordinator) exits within `wait`; it is reaped then.
  bool WorkerExits(int i, std::chrono::milliseconds wait);
  bool CoordinatorExits(std::chrono::milliseconds wait);

 private:
  LocalCluster() = default;
  absl::Status WaitForWorkers(int count);
  // Spawns lact-coordinator with `args` and reads its addresses.
  absl::Status StartCoordinator(std::vector<std::string> args);

  std::string address_, control_address_, metrics_address_;
  std::string coordinator_binary_;
  std::vector<std::string> coordinator_args_;
  std::vector<std::vector<std::string>> worker_commands_;
  std::string dir_;  // the cluster's secret and credentials, removed with the cluster
  ClientSecurity security_;
  std::string tls_ca_file_;
  pid_t coordinator_ = -1;
  std::vector<pid_t> workers_;
};

}  // namespace lact

#endif  // LACT_CLIENT_LOCAL_CLUSTER_H_
