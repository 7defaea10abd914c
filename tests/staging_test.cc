// Jobs staged behind a running one on the same workers, end to end through
// real processes on 127.0.0.1: the second job's bytes reach the workers
// while the first computes (the workers' staged bytes say so), it starts
// the moment the first ends, and both equal their runs alone bit for bit;
// cancelled while staged, it frees its staged bytes at once; a worker lost
// while holding staged bytes makes both jobs run again, still equal to
// their runs alone; and the staged bytes never pass a worker's cap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "tests/metrics_scrape.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

// Per worker (by its metrics address): one gauge's value now.
std::vector<double> WorkerSamples(LactClient& client, const std::string& series) {
  std::vector<double> values;
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
  EXPECT_TRUE(workers.ok()) << workers.status();
  for (const v1::WorkerInfo& w : workers.ok() ? *workers : std::vector<v1::WorkerInfo>{}) {
    if (w.healthy()) values.push_back(Sample(Scrape(w.metrics_address()), series));
  }
  return values;
}

bool AllAbove(const std::vector<double>& values, double bound) {
  if (values.empty()) return false;
  for (double v : values) {
    if (v <= bound) return false;
  }
  return true;
}

SubmitOptions Options() {
  SubmitOptions o;
  o.model = "preset:small:2";
  o.workers = 2;
  o.return_state = true;
  o.timeout = std::chrono::seconds(180);
  return o;
}

// Job A (long enough for B's upload to land while it computes) and job B.
struct Pair {
  Tensor a = RandomTokens(32768, 256, 71);
  Tensor b = RandomTokens(8192, 256, 72);
  std::vector<Tensor> b_queries = {RandomTokens(24, 256, 73)};
};

// A, then B submitted once A computes (so B is leased behind it); `while_staged`
// runs once B's bytes are staged on every worker, with B's id.
struct Outcome {
  absl::StatusOr<JobResult> a = absl::UnknownError("not run");
  absl::StatusOr<JobResult> b = absl::UnknownError("not run");
};
Outcome RunStaged(LocalCluster& cluster, const Pair& pair,
                  const std::function<void(const std::string& b_id)>& while_staged = nullptr) {
  Outcome out;
  LactClient client(cluster.address());
  std::atomic<bool> computing{false};
  std::thread a([&] {
    out.a = LactClient(cluster.address()).Submit(Options(), pair.a, {}, [&](const v1::Progress& p) {
      if (p.stage() == v1::Progress::LAYERS) computing = true;
    });
  });
  EXPECT_TRUE(WaitFor([&] { return computing.load(); }, std::chrono::seconds(120)));
  std::string b_id;
  absl::Mutex mu;
  std::thread b([&] {
    out.b = LactClient(cluster.address())
                .Submit(Options(), pair.b, pair.b_queries, nullptr, [&](const std::string& id) {
                  absl::MutexLock lock(&mu);
                  b_id = id;
                });
  });
  if (while_staged) {
    EXPECT_TRUE(WaitFor([&] {
      return AllAbove(WorkerSamples(client, "lact_worker_staged_bytes"), 0);
    })) << "B's bytes were never staged";
    absl::MutexLock lock(&mu);
    while_staged(b_id);
  }
  a.join();
  b.join();
  return out;
}

class StagingTest : public ::testing::Test {
 protected:
  void Alone(LocalCluster& cluster) {
    LactClient client(cluster.address());
    alone_a_ = client.Submit(Options(), pair_.a, {});
    ASSERT_TRUE(alone_a_.ok()) << alone_a_.status();
    alone_b_ = client.Submit(Options(), pair_.b, pair_.b_queries);
    ASSERT_TRUE(alone_b_.ok()) << alone_b_.status();
  }

  Pair pair_;
  absl::StatusOr<JobResult> alone_a_ = absl::UnknownError("not run");
  absl::StatusOr<JobResult> alone_b_ = absl::UnknownError("not run");
};

TEST_F(StagingTest, AStagedJobStartsAsTheOneBeforeItEndsAndEqualsItsRunAlone) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  ASSERT_NO_FATAL_FAILURE(Alone(*cluster));
  LactClient client(cluster->address());
  const Outcome staged = RunStaged(*cluster, pair_, [](const std::string&) {});
  ASSERT_TRUE(staged.a.ok()) << staged.a.status();
  ASSERT_TRUE(staged.b.ok()) << staged.b.status();
  ExpectSameResults(*staged.a, *alone_a_);
  ExpectSameResults(*staged.b, *alone_b_);
  ASSERT_EQ(staged.b->stats.worker_idle_seconds_size(), 2);
  for (double idle : staged.b->stats.worker_idle_seconds()) {
    EXPECT_LT(idle, 0.5) << "B's compute waited on its worker after A's ended";
  }
  EXPECT_TRUE(AllAbove(WorkerSamples(client, "lact_worker_staged_bytes_peak"), 0));
  for (double now : WorkerSamples(client, "lact_worker_staged_bytes")) EXPECT_EQ(now, 0);
}

TEST_F(StagingTest, AStagedJobCancelledFreesItsStagedBytesAtOnce) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  std::chrono::steady_clock::duration freed_after{};
  const Outcome staged = RunStaged(*cluster, pair_, [&](const std::string& b_id) {
    const auto cancelled = std::chrono::steady_clock::now();
    ASSERT_TRUE(client.CancelJob(b_id).ok());
    EXPECT_TRUE(WaitFor(
        [&] {
          for (double v : WorkerSamples(client, "lact_worker_staged_bytes")) {
            if (v != 0) return false;
          }
          return true;
        },
        std::chrono::seconds(5)));
    freed_after = std::chrono::steady_clock::now() - cancelled;
  });
  EXPECT_LT(freed_after, std::chrono::seconds(2)) << "staged bytes outlived the cancel";
  EXPECT_TRUE(staged.a.ok()) << "A runs on: " << staged.a.status();
  ASSERT_FALSE(staged.b.ok());
  EXPECT_EQ(staged.b.status().code(), absl::StatusCode::kCancelled) << staged.b.status();
}

TEST_F(StagingTest, AWorkerLostHoldingStagedBytesRunsBothJobsAgainBitIdentically) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2, {}, "", {"--max-reruns", "3"});
  ASSERT_NE(cluster, nullptr);
  ASSERT_NO_FATAL_FAILURE(Alone(*cluster));
  const Outcome staged = RunStaged(*cluster, pair_, [&](const std::string&) {
    EXPECT_TRUE(cluster->RestartWorker(0).ok());  // kill -9, started again as a supervisor would
  });
  ASSERT_TRUE(staged.a.ok()) << staged.a.status();
  ASSERT_TRUE(staged.b.ok()) << staged.b.status();
  EXPECT_GT(staged.a->stats.reruns(), 0);
  EXPECT_GT(staged.b->stats.reruns(), 0);
  ExpectSameResults(*staged.a, *alone_a_);
  ExpectSameResults(*staged.b, *alone_b_);
}

TEST_F(StagingTest, StagedBytesNeverPassTheWorkersCap) {
  constexpr int64_t kCap = 6 << 20;  // B's shards hold 8 MiB each (decoded): one chunk fits
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(2, {"--staging-bytes", std::to_string(kCap)});
  ASSERT_NE(cluster, nullptr);
  pair_.b = RandomTokens(16384, 256, 74);
  ASSERT_NO_FATAL_FAILURE(Alone(*cluster));
  LactClient client(cluster->address());
  const Outcome staged = RunStaged(*cluster, pair_, [](const std::string&) {});
  ASSERT_TRUE(staged.b.ok()) << staged.b.status();
  ExpectSameResults(*staged.b, *alone_b_);
  const std::vector<double> peaks = WorkerSamples(client, "lact_worker_staged_bytes_peak");
  EXPECT_TRUE(AllAbove(peaks, 0)) << "nothing was staged";
  for (double peak : peaks) EXPECT_LE(peak, kCap);
}

}  // namespace
}  // namespace lact::testing
