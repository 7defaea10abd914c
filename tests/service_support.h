// Shared by the end-to-end suites (CPU and GPU workers): a model folder
// holding every golden case's model, the golden comparison of a job's
// result (every tensor within 1e-4) and the exact comparison of two.
#ifndef LACT_TESTS_SERVICE_SUPPORT_H_
#define LACT_TESTS_SERVICE_SUPPORT_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "tests/golden_case.h"

namespace lact::testing {

// A folder (made once per process) of links to the golden models, named
// after their cases, for `lact-worker --model-dir`.
std::string ModelDir();

void ExpectGolden(const GoldenCase& golden, const JobResult& got);

// `got` holds the same outputs, query outputs and state as `want`, bit for
// bit.
void ExpectSameResults(const JobResult& got, const JobResult& want);

// Calls `done` every 20 ms until it returns true (then true) or `bound`
// has passed (then false): how a test waits for what a busy machine may
// delay by seconds, instead of looking once after a fixed sleep.
bool WaitFor(const std::function<bool()>& done,
             std::chrono::milliseconds bound = std::chrono::seconds(20));

// Submit options for a golden case's model and job options.
SubmitOptions GoldenOptions(const GoldenCase& golden);

// Submit options for a job of `model` on `workers` workers with a 120 s
// timeout: a 65,536-token context of it computes for seconds, long enough
// to stop, kill or signal a process mid-job.
SubmitOptions LongJobOptions(int workers, const std::string& model = "preset:small:2");

// A coordinator with short timeouts (5 s collectives and leases, 1 s upload
// idle) and `workers` workers of one thread each over ModelDir(), with
// `worker_args` added to every worker's flags, `coordinator_args` to the
// coordinator's (with `token`, a token they require), and `data_root` (if
// any) as the cluster's --data-root;
// null (and a test failure) if it does not start. The binaries are the
// build's, or $LACT_BIN_DIR's.
// The same for `options` as given, with the defaults above filled in where
// empty (model dir, one thread per worker, binaries, short timeouts and
// 300 ms heartbeats first in the coordinator's flags, unless they name
// the flag themselves).
std::unique_ptr<LocalCluster> StartTestCluster(LocalClusterOptions options);

std::unique_ptr<LocalCluster> StartTestCluster(int workers,
                                               std::vector<std::string> worker_args = {},
                                               std::string data_root = "",
                                               std::vector<std::string> coordinator_args = {},
                                               std::string token = "");

// A shell command's exit code (-1 when it did not exit) and its stdout
// (with its stderr too where the command says 2>&1).
struct CommandResult {
  int exit_code;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

// A test suite sharing one cluster of `kWorkers` workers
// (StartTestCluster), started before its first test and stopped after its
// last; each test fails at once if it did not start.
template <int kWorkers>
class ClusterSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = StartTestCluster(kWorkers).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  static LactClient Client() { return LactClient(cluster_->address()); }
  inline static LocalCluster* cluster_ = nullptr;
};

// A job submitted through `client` that runs `act` once, from its progress
// callback, when it reports its first layer (to stop, kill or signal a
// process mid-compute).
struct ActedJob {
  absl::StatusOr<JobResult> result;
  bool acted = false;                               // false: it ended before its first layer
  std::chrono::steady_clock::duration after_act{};  // from `act` to the job's end
};
ActedJob SubmitActingAtFirstLayer(LactClient& client, const SubmitOptions& options,
                                  const Tensor& context, const std::function<void()>& act);

}  // namespace lact::testing

#endif  // LACT_TESTS_SERVICE_SUPPORT_H_
