// A coordinator and N workers as child processes on 127.0.0.1: what
// `lact local` runs and what the end-to-end tests start. Start() returns
// once the coordinator listens and every worker has registered; the
// destructor stops them (SIGTERM, then SIGKILL after 10 s) and reaps them.
#ifndef LACT_CLIENT_LOCAL_CLUSTER_H_
#define LACT_CLIENT_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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
  std::vector<std::string> worker_args;       // extra flags for every worker (e.g. --backend cuda)
  // CUDA devices the workers take in turn (worker i: devices[i % size]);
  // empty: no --device flag.
  std::vector<int> devices;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();

  const std::string& address() const { return address_; }
  pid_t coordinator_pid() const { return coordinator_; }
  // SIGKILLs worker i (fault injection) and reaps it.
  void KillWorker(int i);

 private:
  LocalCluster() = default;
  absl::Status WaitForWorkers(int count);

  std::string address_;
  pid_t coordinator_ = -1;
  std::vector<pid_t> workers_;
};

}  // namespace lact

#endif  // LACT_CLIENT_LOCAL_CLUSTER_H_
