// The job state machine without a network: every transition, a cancel at
// each stage (and its cause winning over what follows from it), and the
// order in which failure causes explain a job's end.
#include "server/job_machine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"

namespace lact::server {
namespace {

using ::testing::HasSubstr;

const RankEnd kOk{absl::OkStatus(), true};

std::unique_ptr<JobMachine> Running(int ranks, std::atomic<int>* cancels = nullptr) {
  auto machine = std::make_unique<JobMachine>("job-1");
  JobMachine& m = *machine;
  std::vector<std::string> workers;
  for (int r = 0; r < ranks; ++r) workers.push_back(absl::StrCat("w", r, ":1"));
  EXPECT_TRUE(m.Leased(workers));
  if (cancels != nullptr) m.SetCancelAction([cancels] { ++*cancels; });
  EXPECT_TRUE(m.Started());
  return machine;
}

TEST(JobMachine, HappyPathVisitsEveryStage) {
  JobMachine m("job-1");
  EXPECT_EQ(m.stage(), JobStage::kQueued);
  EXPECT_EQ(m.outcome().code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(std::string(m.outcome().message()), HasSubstr("still queued"));
  ASSERT_TRUE(m.Leased({"a:1", "b:2"}));
  EXPECT_EQ(m.stage(), JobStage::kStarting);
  EXPECT_FALSE(m.Leased({"c:3"})) << "a job is leased once";
  ASSERT_TRUE(m.Started());
  EXPECT_EQ(m.stage(), JobStage::kRunning);
  EXPECT_FALSE(m.RankEnded(1, kOk));
  EXPECT_EQ(m.stage(), JobStage::kRunning) << "rank 0 still runs";
  EXPECT_FALSE(m.RankEnded(1, kOk)) << "a rank ends once";
  EXPECT_FALSE(m.RankEnded(0, kOk));
  EXPECT_EQ(m.stage(), JobStage::kSucceeded);
  EXPECT_TRUE(m.ended());
  EXPECT_TRUE(m.outcome().ok());
  EXPECT_FALSE(m.Cancel(CancelCause::kCancelJob)) << "an ended job cannot be cancelled";
  EXPECT_TRUE(m.outcome().ok());
}

TEST(JobMachine, OnlyAJobWhoseWorkerIsGoneRunsAgain) {
  std::string gone;
  {  // The transport to rank 1 broke: rank 1's worker is gone.
    std::unique_ptr<JobMachine> m = Running(2);
    m->RankEnded(0, {absl::UnavailableError("gloo: a peer is gone"), true});
    m->RankEnded(1, {absl::UnavailableError("Socket closed"), false});
    ASSERT_EQ(m->stage(), JobStage::kFailed);
    ASSERT_TRUE(m->Retry(&gone));
    EXPECT_EQ(gone, "w1:1");
    EXPECT_EQ(m->stage(), JobStage::kQueued);
    EXPECT_FALSE(m->gone_rank().has_value()) << "the attempt's failures are forgotten";
    ASSERT_TRUE(m->Leased({"w2:1", "w3:1"}));
    ASSERT_TRUE(m->Started());
    m->RankEnded(0, kOk);
    m->RankEnded(1, kOk);
    EXPECT_TRUE(m->outcome().ok()) << m->outcome();
  }
  {  // A worker reports its group broken, the gone peer unnamed.
    std::unique_ptr<JobMachine> m = Running(2);
    m->RankEnded(0, {absl::UnavailableError("gloo connect failed, a peer is gone"), true});
    m->RankEnded(1, {absl::CancelledError("cancelled"), false});
    ASSERT_TRUE(m->Retry(&gone));
    EXPECT_EQ(gone, "");
  }
  {  // A worker refused the job: running it again would fail the same way.
    std::unique_ptr<JobMachine> m = Running(2);
    m->RankEnded(0, {absl::InvalidArgumentError("token 5 is nan"), true});
    m->RankEnded(1, kOk);
    EXPECT_FALSE(m->Retry(&gone));
    EXPECT_EQ(m->stage(), JobStage::kFailed);
  }
  {  // The client stopped sending its tokens: its upload timed out.
    std::unique_ptr<JobMachine> m = Running(2);
    m->RankEnded(
        0, {absl::DeadlineExceededError("no token chunk for 1000 ms during the upload"), true});
    m->RankEnded(1, {absl::CancelledError("cancelled"), false});
    EXPECT_FALSE(m->Retry(&gone));
    EXPECT_EQ(m->stage(), JobStage::kFailed);
  }
  {  // Cancelled: never again.
    std::unique_ptr<JobMachine> m = Running(2);
    m->Cancel(CancelCause::kCancelJob);
    m->RankEnded(0, {absl::UnavailableError("Socket closed"), false});
    m->RankEnded(1, {absl::CancelledError("cancelled"), false});
    EXPECT_FALSE(m->Retry(&gone));
    EXPECT_EQ(m->stage(), JobStage::kCancelled);
  }
  {  // Refused by the queue.
    JobMachine m("job-1");
    m.QueueFailed(absl::ResourceExhaustedError("the queue is full"));
    EXPECT_FALSE(m.Retry(&gone));
  }
}

TEST(JobMachine, APeerSilentWhileTheGroupGaveUpIsBlamedAsStalled) {
  std::unique_ptr<JobMachine> m = Running(3);
  m->RankEnded(1, {absl::UnavailableError("gloo all-reduce timed out after 5000 ms"), true});
  m->RankEnded(2, {absl::UnavailableError("gloo: a peer is gone"), true});
  m->PeersSilent();  // rank 0 said nothing for the grace period
  m->RankEnded(0, {absl::CancelledError("cancelled by the coordinator"), false});
  ASSERT_EQ(m->stage(), JobStage::kFailed);
  EXPECT_EQ(m->outcome().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(m->outcome().message()),
              HasSubstr("worker w0:1 (rank 0) stalled: it said nothing while its peers' "
                        "collective gave up waiting (gloo all-reduce timed out after 5000 ms)"));
  EXPECT_EQ(m->gone_rank(), 0) << "the registry marks the stalled worker failed";
  std::string gone;
  ASSERT_TRUE(m->Retry(&gone));
  EXPECT_EQ(gone, "w0:1");

  std::unique_ptr<JobMachine> died = Running(2);  // a gone worker still explains more
  died->RankEnded(1, {absl::UnavailableError("gloo: a peer is gone"), true});
  died->RankEnded(0, {absl::UnavailableError("Socket closed"), false});
  died->PeersSilent();
  EXPECT_THAT(std::string(died->outcome().message()), HasSubstr("w0:1 (rank 0) is gone"));
}

TEST(JobMachine, QueueFailureEndsTheJobWithTheQueuesStatus) {
  JobMachine m("job-1");
  m.QueueFailed(absl::ResourceExhaustedError("the queue is full"));
  EXPECT_EQ(m.stage(), JobStage::kFailed);
  EXPECT_EQ(m.outcome(), absl::ResourceExhaustedError("the queue is full"));
  EXPECT_FALSE(m.Leased({"a:1"}));
}

TEST(JobMachine, CancelWhileQueuedEndsAtOnceAndRefusesTheLease) {
  JobMachine m("job-1");
  std::atomic<int> cancels{0};
  m.SetCancelAction([&] { ++cancels; });
  EXPECT_TRUE(m.Cancel(CancelCause::kCancelJob));
  EXPECT_EQ(m.stage(), JobStage::kCancelled);
  EXPECT_FALSE(m.Leased({"a:1"})) << "the caller must give the workers back";
  EXPECT_EQ(m.outcome().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(m.outcome().message()), HasSubstr("job-1 cancelled by CancelJob"));
  EXPECT_FALSE(m.Cancel(CancelCause::kClientGone)) << "the first cause wins";
}

TEST(JobMachine, CancelWhileStartingRunsTheActionAndEndsWhenRanksDo) {
  JobMachine m("job-1");
  ASSERT_TRUE(m.Leased({"a:1", "b:2"}));
  std::atomic<int> cancels{0};
  EXPECT_TRUE(m.Cancel(CancelCause::kClientGone));
  m.SetCancelAction([&] { ++cancels; });
  EXPECT_EQ(cancels, 1) << "an action set after the cancel runs at once";
  EXPECT_FALSE(m.Started()) << "do not announce a cancelled job";
  EXPECT_EQ(m.stage(), JobStage::kRunning) << "its opened streams still end";
  EXPECT_FALSE(m.RankEnded(0, {absl::CancelledError("cancelled"), false}));
  EXPECT_FALSE(m.RankEnded(1, {absl::UnavailableError("connection reset"), false}));
  EXPECT_EQ(m.stage(), JobStage::kCancelled);
  EXPECT_EQ(m.outcome(), absl::CancelledError("job job-1 cancelled: the client went away"));
  EXPECT_EQ(cancels, 1);
}

TEST(JobMachine, CancelWhileRunningWinsOverTheFailuresItCauses) {
  std::atomic<int> cancels{0};
  std::unique_ptr<JobMachine> machine = Running(3, &cancels);
  JobMachine& m = *machine;
  EXPECT_TRUE(m.Cancel(CancelCause::kDeadline));
  EXPECT_EQ(cancels, 1);
  EXPECT_FALSE(m.Cancel(CancelCause::kCancelJob));
  EXPECT_EQ(cancels, 1) << "the action runs once";
  EXPECT_FALSE(m.RankEnded(2, {absl::UnavailableError("gloo: peer closed"), true}))
      << "failures after a cancel do not ask to cancel again";
  m.RankEnded(1, {absl::UnavailableError("transport closed"), false});
  EXPECT_EQ(m.stage(), JobStage::kRunning);
  m.RankEnded(0, {absl::CancelledError("cancelled"), false});
  EXPECT_EQ(m.stage(), JobStage::kCancelled);
  EXPECT_EQ(m.outcome(), absl::DeadlineExceededError("job job-1: the call's deadline expired"));
}

TEST(JobMachine, EachCancelCauseHasItsOwnStatus) {
  const std::pair<CancelCause, absl::Status> cases[] = {
      {CancelCause::kCancelJob, absl::CancelledError("job job-1 cancelled by CancelJob")},
      {CancelCause::kClientGone, absl::CancelledError("job job-1 cancelled: the client went away")},
      {CancelCause::kDeadline,
       absl::DeadlineExceededError("job job-1: the call's deadline expired")},
      {CancelCause::kDeleted, absl::CancelledError("job job-1 cancelled: deleted by DeleteJob")},
  };
  for (const auto& [cause, status] : cases) {
    std::unique_ptr<JobMachine> machine = Running(1);
    JobMachine& m = *machine;
    ASSERT_TRUE(m.Cancel(cause));
    m.RankEnded(0, {absl::CancelledError("x"), false});
    EXPECT_EQ(m.outcome(), status);
  }
}

// A worker reports its shard CANCELLED, the job not cancelled: the
// client's stream to it went away mid-upload. The client left, so the job
// is CANCELLED (as its Submit call's code says), naming where it was seen,
// and it does not run again.
TEST(JobMachine, AShardCancelledByItsClientLeavingCancelsTheJob) {
  std::unique_ptr<JobMachine> machine = Running(2);
  JobMachine& m = *machine;
  EXPECT_TRUE(
      m.RankEnded(0, {absl::CancelledError("the client went away during the upload"), true}));
  m.RankEnded(1, {absl::CancelledError("cancelled"), false});
  EXPECT_EQ(m.stage(), JobStage::kCancelled);
  EXPECT_EQ(m.outcome().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(m.outcome().message()),
              ::testing::HasSubstr("cancelled: the client went away (worker "));
  EXPECT_THAT(std::string(m.outcome().message()),
              ::testing::HasSubstr("(rank 0): the client went away during the upload)"));
  std::string gone;
  EXPECT_FALSE(m.Retry(&gone));
}

TEST(JobMachine, CancelAfterTheLastRankSucceededIsRefused) {
  std::atomic<int> cancels{0};
  std::unique_ptr<JobMachine> machine = Running(1, &cancels);
  JobMachine& m = *machine;
  m.RankEnded(0, kOk);
  EXPECT_FALSE(m.Cancel(CancelCause::kCancelJob));
  EXPECT_EQ(cancels, 0);
  EXPECT_TRUE(m.outcome().ok());
}

TEST(JobMachine, StartFailureBlamesTheUnreachableWorker) {
  JobMachine m("job-1");
  ASSERT_TRUE(m.Leased({"a:1", "b:2"}));
  m.StartFailed(1, absl::UnavailableError("connection refused"));
  EXPECT_EQ(m.stage(), JobStage::kFailed);
  EXPECT_EQ(m.gone_rank(), 1);
  EXPECT_EQ(m.outcome(), absl::UnavailableError(
                             "job job-1 failed: worker b:2 (rank 1) is gone: connection refused"));
  EXPECT_FALSE(m.Started());
}

TEST(JobMachine, AStartBrokenByACancelBlamesNoWorker) {
  JobMachine m("job-1");
  ASSERT_TRUE(m.Leased({"a:1", "b:2"}));
  ASSERT_TRUE(m.Cancel(CancelCause::kCancelJob));
  m.StartFailed(0, absl::CancelledError("stream cancelled before it opened"));
  EXPECT_EQ(m.stage(), JobStage::kCancelled);
  EXPECT_FALSE(m.gone_rank().has_value());
  EXPECT_EQ(m.outcome(), absl::CancelledError("job job-1 cancelled by CancelJob"));
}

TEST(JobMachine, AGoneWorkerExplainsItsPeersFailuresWhicheverEndsFirst) {
  for (bool gone_first : {true, false}) {
    std::unique_ptr<JobMachine> machine = Running(3);
    JobMachine& m = *machine;
    const RankEnd peer{absl::UnavailableError("gloo: connection closed by peer"), true};
    const RankEnd gone{absl::UnavailableError("Socket closed"), false};
    if (gone_first) {
      EXPECT_TRUE(m.RankEnded(2, gone)) << "the first failure cancels the peers";
      EXPECT_FALSE(m.RankEnded(0, peer));
    } else {
      EXPECT_TRUE(m.RankEnded(0, peer));
      EXPECT_FALSE(m.RankEnded(2, gone));
    }
    m.RankEnded(1, {absl::CancelledError("cancelled"), false});
    EXPECT_EQ(m.stage(), JobStage::kFailed);
    EXPECT_EQ(m.gone_rank(), 2);
    EXPECT_EQ(m.outcome(), absl::UnavailableError(
                               "job job-1 failed: worker w2:1 (rank 2) is gone: Socket closed"));
  }
}

TEST(JobMachine, AWorkersOwnReportBeatsTheCancellationsItCaused) {
  std::unique_ptr<JobMachine> machine = Running(2);
  JobMachine& m = *machine;
  EXPECT_TRUE(m.RankEnded(1, {absl::CancelledError("cancelled by the coordinator"), false}));
  m.RankEnded(0, {absl::InvalidArgumentError("token 7 of the context is not finite"), true});
  EXPECT_EQ(m.stage(), JobStage::kFailed);
  EXPECT_FALSE(m.gone_rank().has_value());
  EXPECT_EQ(m.outcome(),
            absl::InvalidArgumentError(
                "job job-1 failed: worker w0:1 (rank 0): token 7 of the context is not finite"));
}

TEST(JobMachine, OnlyTransportFailuresStillNameAWorker) {
  std::unique_ptr<JobMachine> machine = Running(2);
  JobMachine& m = *machine;
  m.RankEnded(0, kOk);
  m.RankEnded(1, {absl::DeadlineExceededError("Deadline Exceeded"), false});
  EXPECT_EQ(m.outcome(), absl::DeadlineExceededError(
                             "job job-1 failed: worker w1:1 (rank 1): Deadline Exceeded"));
}

TEST(JobMachine, ConcurrentEventsEndTheJobOnce) {
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> cancels{0};
    std::unique_ptr<JobMachine> machine = Running(8, &cancels);
    JobMachine& m = *machine;
    std::atomic<int> first_failures{0};
    std::vector<std::thread> ranks;
    for (int r = 0; r < 8; ++r) {
      ranks.emplace_back([&, r] {
        if (m.RankEnded(r, r % 2 ? kOk : RankEnd{absl::InternalError("boom"), true}))
          ++first_failures;
      });
    }
    std::thread canceller([&] { m.Cancel(CancelCause::kCancelJob); });
    for (std::thread& t : ranks) t.join();
    canceller.join();
    EXPECT_TRUE(m.ended());
    EXPECT_LE(first_failures + cancels, 2);
    EXPECT_LE(cancels, 1);
    EXPECT_FALSE(m.outcome().ok());
  }
}

}  // namespace
}  // namespace lact::server
