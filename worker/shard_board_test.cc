// The board of a worker's shards as their coordinator follows them: a
// shard whose call ended is held, reported, let go on the coordinator's
// word or after the grace (cancelled, what it kept forgotten, the reason
// kept for AttachShard), and followed again to its outcome.
#include "worker/shard_board.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace lact {
namespace {

struct Forgotten {
  std::vector<std::string> jobs;
  ShardBoard::ForgetKept fn() {
    return [this](const BoardShard& s) { jobs.push_back(s.key().job_id); };
  }
};

v1::ShardDone Done(double compute) {
  v1::ShardDone d;
  d.set_compute_seconds(compute);
  return d;
}

TEST(ShardBoard, AHeldShardIsReportedAndTheCoordinatorsDropCancelsIt) {
  Forgotten forgotten;
  ShardBoard board(std::chrono::seconds(60), forgotten.fn());
  int held_calls = 0;
  board.OnHeld([&] { ++held_calls; });
  std::shared_ptr<BoardShard> shard = board.Begin({"job-a", 1, 0}, "fetch");
  bool cancelled = false;
  shard->SetCancelAction([&] { cancelled = true; });
  EXPECT_TRUE(board.Held().empty()) << "followed by its RunShard call";
  shard->Unfollow();
  board.BecameHeld();
  EXPECT_EQ(held_calls, 1);
  std::vector<v1::HeldShard> held = board.Held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].job_id(), "job-a");
  EXPECT_EQ(held[0].attempt(), 1);
  EXPECT_FALSE(held[0].ended());
  board.Drop({"job-a", 1, 0}, "its coordinator let it go");
  EXPECT_TRUE(cancelled) << "a running shard dropped is cancelled";
  EXPECT_TRUE(shard->dropped());
  shard->End(absl::CancelledError("cancelled"));
  board.Finished(shard);
  EXPECT_EQ(forgotten.jobs, std::vector<std::string>{"job-a"}) << "what it kept goes";
  absl::StatusOr<std::shared_ptr<BoardShard>> found = board.Find({"job-a", 1, 0});
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(found.status().message().find("its coordinator let it go"), std::string::npos);
  EXPECT_EQ(board.Find({"job-a", 2, 0}).status().code(), absl::StatusCode::kUnavailable)
      << "a shard never run here";
}

TEST(ShardBoard, AHeldShardIsFollowedAgainToItsOutcome) {
  Forgotten forgotten;
  ShardBoard board(std::chrono::seconds(60), forgotten.fn());
  std::shared_ptr<BoardShard> shard = board.Begin({"job-b", 0, 1}, "fetch");
  shard->LayersDone(1);
  shard->Unfollow();  // the coordinator went away
  absl::StatusOr<std::shared_ptr<BoardShard>> found = board.Find({"job-b", 0, 1});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE((*found)->Follow());
  EXPECT_FALSE((*found)->Follow()) << "one follower at a time";
  EXPECT_TRUE(board.Held().empty()) << "followed again";
  ShardView seen;
  seen = (*found)->Await(seen);
  EXPECT_EQ(seen.layers_done, 1) << "where it stands";
  std::thread ends([&] {
    shard->LayersDone(2);
    shard->End(Done(3.5));
    board.Finished(shard);  // its flow is over; the follower delivers
  });
  while (!seen.ended) seen = (*found)->Await(seen);
  ends.join();
  ASSERT_TRUE(seen.outcome.ok());
  EXPECT_EQ(seen.outcome->compute_seconds(), 3.5);
  EXPECT_TRUE(board.Find({"job-b", 0, 1}).ok()) << "kept until delivered";
  (*found)->Delivered();
  board.Remove(*found);
  EXPECT_TRUE(forgotten.jobs.empty()) << "a delivered shard's results stay retained";
  // A coordinator that stopped before it recorded the outcome follows the
  // shard again, to the same outcome.
  absl::StatusOr<std::shared_ptr<BoardShard>> again = board.Find({"job-b", 0, 1});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Follow());
  const ShardView view = (*again)->Await(ShardView());
  ASSERT_TRUE(view.ended && view.outcome.ok());
  EXPECT_EQ(view.outcome->compute_seconds(), 3.5);
  EXPECT_TRUE(board.Held().empty()) << "a delivered shard is not held";
}

TEST(ShardBoard, AShardHeldPastTheGraceIsDroppedSayingWhy) {
  Forgotten forgotten;
  ShardBoard board(std::chrono::seconds(1), forgotten.fn());
  std::shared_ptr<BoardShard> shard = board.Begin({"job-c", 0, 0}, "fetch");
  shard->End(Done(1));
  shard->Unfollow();
  board.Finished(shard);
  board.DropExpired();
  EXPECT_TRUE(board.Find({"job-c", 0, 0}).ok()) << "within the grace";
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  board.DropExpired();
  absl::StatusOr<std::shared_ptr<BoardShard>> found = board.Find({"job-c", 0, 0});
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(found.status().message().find("--coordinator-grace-seconds"), std::string::npos);
  EXPECT_EQ(forgotten.jobs, std::vector<std::string>{"job-c"}) << "its kept results go";
}

TEST(ShardBoard, WithNoGraceNothingIsHeld) {
  Forgotten forgotten;
  ShardBoard board(std::chrono::seconds(0), forgotten.fn());
  std::shared_ptr<BoardShard> shard = board.Begin({"job-d", 0, 0}, "fetch");
  shard->End(Done(1));
  shard->Unfollow();
  board.Finished(shard);
  EXPECT_FALSE(board.Find({"job-d", 0, 0}).ok());
}

// The shard's thread clears its cancel action before what the action
// touches goes; a Drop running the action at that moment on another thread
// must finish first.
TEST(ShardBoard, ClearingTheCancelActionWaitsForADropRunningIt) {
  Forgotten forgotten;
  ShardBoard board(std::chrono::seconds(60), forgotten.fn());
  std::shared_ptr<BoardShard> shard = board.Begin({"job-c", 1, 0}, "fetch");
  std::atomic<bool> entered{false}, finished{false};
  shard->SetCancelAction([&] {
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    finished = true;
  });
  std::thread dropper([&] { shard->Drop(); });
  while (!entered) std::this_thread::yield();
  shard->SetCancelAction(nullptr);
  EXPECT_TRUE(finished) << "the action still ran after it was cleared";
  dropper.join();
  shard->Drop();  // a second Drop runs nothing
}

}  // namespace
}  // namespace lact
