// The worker's compute line on its own: turns in the order shards joined,
// staged bytes held under the cap however many streams push at once, freed
// at once when a staged shard leaves, and a staged transfer's chunk that
// waits for room let go by its shard's cancel.
#include "worker/data_plane/compute_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "worker/data_plane/shard_transfer.h"

namespace lact {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(ComputeLine, TurnsComeInTheOrderShardsJoined) {
  ComputeLine line(0);
  std::shared_ptr<ComputeLine::Place> first = line.Join();
  std::shared_ptr<ComputeLine::Place> second = line.Join();
  std::atomic<bool> second_turn{false};
  std::thread waiter([&] {
    ASSERT_TRUE(second->AwaitTurn().ok());
    second_turn = true;
  });
  ASSERT_TRUE(first->AwaitTurn().ok());
  EXPECT_EQ(first->BeginCompute(), 0) << "nothing computed before it";
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(second_turn) << "the second waits while the first computes";
  first->EndTurn();
  waiter.join();
  EXPECT_TRUE(second_turn);
  const double idle = second->BeginCompute();
  EXPECT_GE(idle, 0);
  EXPECT_LT(idle, 5) << "idle counts from the first's end, not its start";
  second->EndTurn();
  EXPECT_EQ(line.size(), 0);
}

TEST(ComputeLine, AStagedShardTakesBytesUpToTheCapThenWaitsForItsTurn) {
  ComputeLine line(100);
  std::shared_ptr<ComputeLine::Place> computing = line.Join();
  std::shared_ptr<ComputeLine::Place> staged = line.Join();
  ASSERT_TRUE(computing->AwaitTurn().ok());
  EXPECT_TRUE(computing->Admit(1000).ok()) << "the computing shard's bytes are not staged";
  EXPECT_EQ(line.staged_bytes(), 0);
  ASSERT_TRUE(staged->Admit(60).ok());
  ASSERT_TRUE(staged->Admit(40).ok());
  EXPECT_EQ(line.staged_bytes(), 100);
  std::atomic<bool> admitted{false};
  std::thread chunk([&] {
    ASSERT_TRUE(staged->Admit(1).ok());
    admitted = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(admitted) << "one byte past the cap waits";
  computing->EndTurn();
  chunk.join();
  EXPECT_TRUE(admitted) << "its turn came: nothing is staged any more";
  ASSERT_TRUE(staged->AwaitTurn().ok());
  EXPECT_EQ(line.staged_bytes(), 0);
  EXPECT_EQ(line.peak_staged_bytes(), 100);
}

// Several staged shards' streams push chunks of random sizes at once while
// shards ahead of them end one by one: the staged bytes never pass the cap.
TEST(ComputeLine, StagedBytesNeverPassTheCapUnderManyStreams) {
  constexpr int64_t kCap = 1000;
  ComputeLine line(kCap);
  std::vector<std::shared_ptr<ComputeLine::Place>> places;
  for (int i = 0; i < 6; ++i) places.push_back(line.Join());
  std::atomic<bool> over{false};
  std::vector<std::thread> streams;
  for (int i = 1; i < 6; ++i) {
    streams.emplace_back([&, i] {
      std::mt19937 random(i);
      for (int c = 0; c < 200; ++c) {
        ASSERT_TRUE(places[i]->Admit(1 + random() % 300).ok());
        if (line.staged_bytes() > kCap) over = true;
      }
    });
  }
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(places[i]->AwaitTurn().ok());
    std::this_thread::sleep_for(milliseconds(20));
    places[i]->EndTurn();
  }
  for (std::thread& t : streams) t.join();
  EXPECT_FALSE(over);
  EXPECT_LE(line.peak_staged_bytes(), kCap);
  EXPECT_GT(line.peak_staged_bytes(), kCap / 2) << "staging was used";
  EXPECT_EQ(line.staged_bytes(), 0);
}

TEST(ComputeLine, AShardThatLeavesFreesItsStagedBytesAndWakesItsWaits) {
  ComputeLine line(100);
  std::shared_ptr<ComputeLine::Place> computing = line.Join();
  std::shared_ptr<ComputeLine::Place> staged = line.Join();
  std::shared_ptr<ComputeLine::Place> behind = line.Join();
  ASSERT_TRUE(staged->Admit(100).ok());
  std::thread blocked([&] {
    const absl::Status s = behind->Admit(50);
    EXPECT_TRUE(s.ok()) << "room once the staged shard left: " << s;
  });
  std::thread turn([&] { EXPECT_EQ(staged->AwaitTurn().code(), absl::StatusCode::kCancelled); });
  std::this_thread::sleep_for(milliseconds(30));
  staged->Leave();
  blocked.join();
  turn.join();
  EXPECT_EQ(line.staged_bytes(), 50);
  EXPECT_EQ(line.size(), 2);
  behind->Leave();
  EXPECT_EQ(line.staged_bytes(), 0);
}

v1::TokenChunk FloatChunk(int64_t offset, int64_t n) {
  v1::TokenChunk c;
  c.set_set(0);
  c.set_offset(offset);
  c.set_data(std::string(static_cast<size_t>(4 * n), '\0'));
  return c;
}

// A staged transfer's stream blocks at the cap (its client's sends with
// it), and the shard's cancel frees its staged bytes and lets the stream go
// with the cancel's status.
TEST(ComputeLine, AStagedTransfersChunkWaitsAtTheCapUntilItsShardIsCancelled) {
  ComputeLine line(8 * 4);  // eight float32 tokens of width 1
  std::shared_ptr<ComputeLine::Place> computing = line.Join();
  auto transfer =
      std::make_shared<ShardTransfer>("t", TokenReceiver({16}, 1, WireType::kF32, 0, false));
  transfer->SetPlace(line.Join());
  ASSERT_TRUE(transfer->Attach(nullptr, milliseconds(0)).ok());
  ASSERT_TRUE(transfer->Accept(FloatChunk(0, 8)).ok());
  EXPECT_EQ(line.staged_bytes(), 32);
  absl::Status second;
  std::thread stream([&] { second = transfer->Accept(FloatChunk(8, 8)); });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(line.staged_bytes(), 32) << "the chunk past the cap waits";
  transfer->Cancel();
  EXPECT_EQ(line.staged_bytes(), 0) << "a cancelled shard's staged bytes count no more at once";
  stream.join();
  EXPECT_EQ(second.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(second.message()), HasSubstr("cancelled"));
}

// A shard cancelled before its turn (its thread still stuck, say in a
// group whose peer died) leaves the line at once; the shard behind it is
// not held up, and its idle time still counts from the last real compute.
TEST(ComputeLine, AShardClosedBeforeItsTurnLeavesTheLineAtOnce) {
  ComputeLine line(0);
  std::shared_ptr<ComputeLine::Place> done = line.Join();
  ASSERT_TRUE(done->AwaitTurn().ok());
  done->EndTurn();
  std::shared_ptr<ComputeLine::Place> stuck = line.Join();
  std::shared_ptr<ComputeLine::Place> next = line.Join();
  std::this_thread::sleep_for(milliseconds(100));
  stuck->Close();
  ASSERT_EQ(line.size(), 1) << "the closed shard left";
  EXPECT_EQ(stuck->AwaitTurn().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(next->AwaitTurn().ok());
  EXPECT_GE(next->BeginCompute(), 0.1) << "idle since the last compute, not the closed shard";
  next->EndTurn();
  stuck->Leave();
  EXPECT_EQ(line.size(), 0);
}

}  // namespace
}  // namespace lact
