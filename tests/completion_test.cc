// Completion that cannot lie: every stream of a shard's results ends with
// a TransferComplete (its messages, bytes and CRC-32C), and the client
// believes that, not the stream's trailers. Faults come from the workers'
// test hooks (worker/data_plane/test_hooks.h, LACT_TEST_HOOKS, inherited by the
// cluster's processes):
//   - a worker killed after its completion message, before its trailers:
//     Submit succeeds, bit for bit as an undisturbed run;
//   - a worker gone mid-output: Submit fails naming the shard and what is
//     missing, and the CLI leaves no output file looking complete;
//   - a byte changed on the way: the client says so, and keeps nothing as
//     complete.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "common/npy.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kTrials = 20;

// Sets LACT_TEST_HOOKS for the clusters started while it lives.
class Hooks {
 public:
  explicit Hooks(const std::string& hooks) { setenv("LACT_TEST_HOOKS", hooks.c_str(), 1); }
  ~Hooks() { unsetenv("LACT_TEST_HOOKS"); }
};

// A job of 2 shards of 8,192 tokens of preset:small (256 features out):
// 8 MiB of outputs a shard, two 4 MiB messages each.
SubmitOptions TwoShards() {
  SubmitOptions o;
  o.model = "preset:small:7";
  o.workers = 2;
  o.timeout = std::chrono::seconds(120);
  return o;
}
const Tensor& Context() {
  static const Tensor context = RandomTokens(16384, 256, 31);
  return context;
}

TEST(Completion, AWorkerKilledAfterItsCompletionMessageCostsTheClientNothing) {
  absl::StatusOr<JobResult> undisturbed;
  {
    std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
    ASSERT_NE(cluster, nullptr);
    undisturbed = LactClient(cluster->address()).Submit(TwoShards(), Context(), {});
    ASSERT_TRUE(undisturbed.ok()) << undisturbed.status();
  }
  // Each worker holds its Transfer streams' trailers 1.5 s after their
  // completion message; the test kills rank 0's worker in that window, once
  // the job has SUCCEEDED.
  Hooks hooks("hold-transfer-end-ms=1500");
  int succeeded = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
    ASSERT_NE(cluster, nullptr);
    LactClient client(cluster->address());
    std::string job_id;
    auto submitted = std::async(std::launch::async, [&] {
      return client.Submit(TwoShards(), Context(), {}, nullptr,
                           [&](const std::string& id) { job_id = id; });
    });
    ASSERT_TRUE(WaitFor(
        [&] {
          if (job_id.empty()) return false;
          absl::StatusOr<v1::JobInfo> info = client.GetJob(job_id);
          return info.ok() && info->status() == v1::JobInfo::SUCCEEDED;
        },
        std::chrono::seconds(60)))
        << "trial " << trial;
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
    ASSERT_TRUE(workers.ok()) << workers.status();
    bool killed = false;
    for (int i = 0; i < 2; ++i) {
      // The worker that ran rank 0 is the one whose address JobAccepted named.
      absl::StatusOr<v1::JobInfo> info = client.GetJob(job_id);
      ASSERT_TRUE(info.ok());
      if ((*workers)[i].address() == info->accepted().shards(0).worker()) {
        kill(cluster->worker_pid(i), SIGKILL);
        killed = true;
      }
    }
    ASSERT_TRUE(killed) << "trial " << trial;
    absl::StatusOr<JobResult> got = submitted.get();
    ASSERT_TRUE(got.ok()) << "trial " << trial << ": " << got.status();
    ExpectSameResults(*got, *undisturbed);
    ++succeeded;
  }
  EXPECT_EQ(succeeded, kTrials);
}

// A cluster whose jobs do not run again when a worker is gone (the cut
// is the test's point, and a re-run would wait for workers it lacks).
std::unique_ptr<LocalCluster> StartWithoutReruns() {
  return StartTestCluster(2, {}, "", {"--max-reruns", "0"});
}

TEST(Completion, AStreamCutMidOutputIsAnErrorNamingTheShard) {
  // Each worker exits (as if killed) once a stream has sent its first
  // output message of two. The error names the shard (by rank, with its
  // worker) and says it is incomplete or its worker gone.
  Hooks hooks("exit-after-outputs=1");
  int named = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::unique_ptr<LocalCluster> cluster = StartWithoutReruns();
    ASSERT_NE(cluster, nullptr);
    absl::StatusOr<JobResult> got =
        LactClient(cluster->address()).Submit(TwoShards(), Context(), {});
    ASSERT_FALSE(got.ok()) << "trial " << trial << ": a job whose outputs were cut succeeded";
    const std::string message(got.status().message());
    EXPECT_THAT(message, ::testing::AnyOf(HasSubstr("not complete"), HasSubstr("is gone")))
        << got.status();
    named += absl::StrContains(message, "shard ") || absl::StrContains(message, "(rank ");
  }
  EXPECT_EQ(named, kTrials);
}

TEST(Completion, ACutStreamLeavesNoOutputFileLookingComplete) {
  Hooks hooks("exit-after-outputs=1");
  std::unique_ptr<LocalCluster> cluster = StartWithoutReruns();
  ASSERT_NE(cluster, nullptr);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/lact_cut_", getpid());
  fs::create_directories(dir);
  ASSERT_TRUE(WriteNpy(dir + "/context.npy", Context()).ok());
  const std::string out = dir + "/out.safetensors";
  const std::string command = absl::StrCat(LACT_CLI_PATH, " submit --server ", cluster->address(),
                                           " --model preset:small:7 --workers 2 --context ", dir,
                                           "/context.npy --out ", out, " > ", dir, "/log 2>&1");
  const int rc = std::system(command.c_str());
  EXPECT_NE(rc, 0) << "the CLI reported success for a cut stream";
  EXPECT_FALSE(fs::exists(out)) << "a cut stream's output file looks complete";
  fs::remove_all(dir);
}

TEST(Completion, ABitChangedOnTheWayIsCaughtAndNamed) {
  Hooks hooks("corrupt-output=1");
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<JobResult> got = LactClient(cluster->address()).Submit(TwoShards(), Context(), {});
  ASSERT_FALSE(got.ok()) << "a changed bit went unnoticed";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("bytes changed on the way")) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("shard ")) << got.status();
}

}  // namespace
}  // namespace lact::testing
