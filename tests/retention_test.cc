// Retained results end by the workers' byte cap, by their TTL and by
// DeleteJob, end to end through real processes on 127.0.0.1, and a client
// is told the same whichever answers: the worker that dropped them (its
// coordinator not yet told) or the coordinator (told by the worker's
// heartbeat, or by a query that found them gone). Both orders are forced,
// not left to a heartbeat's timing: one cluster's heartbeats are a minute
// apart, so nothing reaches its coordinator during the test; the other
// waits for GetJob to show the drop.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "tests/random_model.h"
#include "tests/raw_job.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kEvicted[] = "evicted: the worker's retained results reached its --retain-bytes ";

class RetentionTest : public ClusterSuite<2> {
 protected:
  static SubmitOptions Options() {
    SubmitOptions o;
    o.model = "tiny";
    o.workers = 2;
    o.timeout = std::chrono::seconds(60);
    return o;
  }
  static std::vector<Tensor> Queries() { return {RandomTokens(5, 32, 62)}; }

  // A --retain-bytes with room for one job's results on rank 0's worker
  // (its outputs, the query outputs and the state), not two; weighed from a
  // run on the suite's cluster.
  static int64_t CapForOneJob() {
    absl::StatusOr<JobResult> sized =
        Client().Submit(Options(), RandomTokens(300, 32, 61), Queries());
    EXPECT_TRUE(sized.ok()) << sized.status();
    if (!sized.ok()) return 0;
    int64_t rank0 = sized->queries[0].size() * 4 + sized->output.size() * 4 / 2;
    for (const auto& [name, t] : sized->state) rank0 += t.size() * 4;
    return rank0 * 3 / 2;
  }

  // On `cluster` (workers capped at `cap`): job a, fetched whole, then job
  // b, whose results evict a's. Returns a's id, or "" after a failure.
  static std::string EvictOne(LocalCluster& cluster) {
    LactClient client(cluster.address());
    absl::StatusOr<JobResult> a = client.Submit(Options(), RandomTokens(300, 32, 61), Queries());
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return "";
    absl::StatusOr<JobResult> fetched = client.FetchResult(a->job_id);
    EXPECT_TRUE(fetched.ok()) << fetched.status();
    if (fetched.ok()) ExpectSameResults(*fetched, *a);
    absl::StatusOr<JobResult> b = client.Submit(Options(), RandomTokens(300, 32, 63), Queries());
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? a->job_id : "";
  }

  // FetchResult of evicted job `id`: NOT_FOUND, with the worker's reason
  // and its cap.
  static void ExpectFetchSaysEvicted(LactClient& client, const std::string& id, int64_t cap) {
    absl::StatusOr<JobResult> fetched = client.FetchResult(id);
    EXPECT_EQ(fetched.status().code(), absl::StatusCode::kNotFound) << fetched.status();
    EXPECT_THAT(std::string(fetched.status().message()), HasSubstr(absl::StrCat(kEvicted, cap)));
  }
  // Query of evicted job `id`: FAILED_PRECONDITION, with the same.
  static void ExpectQuerySaysEvicted(LactClient& client, const std::string& id, int64_t cap) {
    absl::StatusOr<JobResult> queried = client.Query(id, Queries());
    EXPECT_EQ(queried.status().code(), absl::StatusCode::kFailedPrecondition) << queried.status();
    EXPECT_THAT(std::string(queried.status().message()), HasSubstr(absl::StrCat(kEvicted, cap)));
  }

  // Waits (up to 30 s) until GetJob says job `id`'s state is no longer
  // retained; its last JobInfo.
  static absl::StatusOr<v1::JobInfo> AwaitStateDropped(LactClient& client, const std::string& id) {
    absl::StatusOr<v1::JobInfo> info;
    WaitFor(
        [&] {
          info = client.GetJob(id);
          return !info.ok() || !info->state_retained();
        },
        std::chrono::seconds(30));
    return info;
  }
};

// The fetch reaches the worker before any heartbeat could tell the
// coordinator: the worker's own NOT_FOUND, with its reason. A query then
// finds the state gone and tells the coordinator, and GetJob says why.
TEST_F(RetentionTest, AnEvictionIsSaidByTheWorkerBeforeItsHeartbeat) {
  const int64_t cap = CapForOneJob();
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(2, {"--retain-bytes", absl::StrCat(cap)}, "", {"--heartbeat-ms", "60000"});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  const std::string a = EvictOne(*cluster);
  ASSERT_FALSE(a.empty());
  ExpectFetchSaysEvicted(client, a, cap);
  absl::StatusOr<v1::JobInfo> unheard = client.GetJob(a);
  ASSERT_TRUE(unheard.ok()) << unheard.status();
  ASSERT_TRUE(unheard->state_retained())
      << "a heartbeat reached the coordinator within the test: the order was not forced";

  ExpectQuerySaysEvicted(client, a, cap);
  absl::StatusOr<v1::JobInfo> told = client.GetJob(a);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_FALSE(told->state_retained()) << "the query told the coordinator";
  EXPECT_FALSE(told->results_retained());
  EXPECT_THAT(told->results_dropped(), HasSubstr(absl::StrCat(kEvicted, cap)));
  ExpectFetchSaysEvicted(client, a, cap);
}

// The heartbeat told the coordinator first: FetchResult and Query answer
// from its record, with the same codes and the worker's reason.
TEST_F(RetentionTest, AnEvictionIsSaidTheSameAfterItsHeartbeat) {
  const int64_t cap = CapForOneJob();
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(2, {"--retain-bytes", absl::StrCat(cap)});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  const std::string a = EvictOne(*cluster);
  ASSERT_FALSE(a.empty());
  absl::StatusOr<v1::JobInfo> heard = AwaitStateDropped(client, a);
  ASSERT_TRUE(heard.ok()) << heard.status();
  ASSERT_FALSE(heard->state_retained()) << "no heartbeat reported the eviction in 30 s";
  EXPECT_FALSE(heard->results_retained());
  EXPECT_THAT(heard->results_dropped(), HasSubstr(absl::StrCat(kEvicted, cap)));
  EXPECT_THAT(heard->results_dropped(), HasSubstr("held the most and this job's were its oldest"));
  ExpectFetchSaysEvicted(client, a, cap);
  ExpectQuerySaysEvicted(client, a, cap);
}

// DeleteJob drops a job's results on every worker at once; only the job's
// fetch ticket fetches them before.
TEST_F(RetentionTest, DeleteJobDropsTheResultsOnEveryWorker) {
  LactClient client = Client();
  absl::StatusOr<JobResult> job = client.Submit(Options(), RandomTokens(300, 32, 63), Queries());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::JobInfo> info = client.GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->accepted().ticket().empty()) << "the Transfer ticket is the submitter's alone";
  v1::JobAccepted wrong = info->accepted();
  wrong.set_fetch_ticket("not-the-ticket");
  EXPECT_EQ(RawFetch(wrong, 0).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(client.DeleteJob(job->job_id).ok());
  EXPECT_EQ(client.FetchResult(job->job_id).status().code(), absl::StatusCode::kNotFound);
  for (int rank = 0; rank < 2; ++rank) {
    const grpc::Status forgotten = RawFetch(info->accepted(), rank);
    EXPECT_EQ(forgotten.error_code(), grpc::StatusCode::NOT_FOUND) << forgotten.error_message();
    EXPECT_THAT(forgotten.error_message(), HasSubstr("deleted by DeleteJob"))
        << "the worker dropped it too";
  }
}

// Past retain_seconds, the coordinator and the workers both say the
// results expired, in the same words.
TEST_F(RetentionTest, ExpiredResultsAreSaidToHaveExpired) {
  LactClient client = Client();
  SubmitOptions o = Options();
  o.retain_seconds = 1;
  absl::StatusOr<JobResult> job = client.Submit(o, RandomTokens(300, 32, 64), Queries());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::JobInfo> info = client.GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  // Both retained it from before Submit returned, for 1 s.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  absl::StatusOr<JobResult> expired = client.FetchResult(job->job_id);
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kNotFound) << expired.status();
  EXPECT_THAT(std::string(expired.status().message()),
              HasSubstr("expired: its retention time passed"));
  absl::StatusOr<v1::JobInfo> after = client.GetJob(job->job_id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->state_retained());
  EXPECT_EQ(after->results_dropped(), "expired: its retention time passed");
  for (int rank = 0; rank < 2; ++rank) {
    const grpc::Status on_worker = RawFetch(info->accepted(), rank);
    EXPECT_EQ(on_worker.error_code(), grpc::StatusCode::NOT_FOUND) << rank;
    EXPECT_THAT(on_worker.error_message(), HasSubstr("expired: its retention time passed"));
  }
}

}  // namespace
}  // namespace lact::testing
