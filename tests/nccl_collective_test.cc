// NcclCollective: argument and device errors (everywhere); on a GPU, a group
// of one (every operation is the identity), usage errors, and a setup whose
// peer never comes; with two GPUs (NCCL allows one rank per GPU), two ranks
// as two threads of this process, and a rank whose peer stalls. The tests
// that need GPUs skip without them (ctest label `gpu`).
#include "worker/collective/nccl_collective.h"

#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/rendezvous/hash_store.h"
#include "kernels/cuda/device.h"

namespace lact::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// scale * (i % 1024) / 4: sums of a few of these are exact in float.
std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 1024) * 0.25f;
  return v;
}

size_t Mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  return wrong;
}

absl::Status Expect(size_t mismatches, const std::string& what) {
  if (mismatches == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", mismatches, " values wrong"));
}

TEST(NcclCollectiveTest, MissingDeviceIsFailedPrecondition) {
  gloo::rendezvous::HashStore store;
  NcclOptions options;
  options.device = cuda::DeviceCount();  // one past the last
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "missing", 0, 1, options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), absl::StrCat("device ", options.device)))
      << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), absl::StrCat(options.device, " visible")))
      << c.status();
}

TEST(NcclCollectiveTest, RankOutsideTheGroupIsInvalidArgument) {
  gloo::rendezvous::HashStore store;
  for (auto [rank, size] : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    absl::StatusOr<std::unique_ptr<NcclCollective>> c =
        NcclCollective::Connect(store, "outside", rank, size, {});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << rank << "/" << size << ": " << c.status();
  }
}

TEST(NcclCollectiveTest, GroupOfOneIsTheIdentity) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "one", 0, 1, {});
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCollective& nccl = **c;
  EXPECT_EQ(nccl.rank(), 0);
  EXPECT_EQ(nccl.size(), 1);
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const cudaStream_t compute = (*ctx)->stream();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3'000'000}, size_t{1000}, size_t{1}}) {
    SCOPED_TRACE(n);
    const std::vector<float> want = Ramp(n, 1.0f);
    std::vector<float> data = want;
    ASSERT_TRUE(nccl.AllReduceSum(data.data(), n).ok());
    EXPECT_EQ(Mismatches(data, want), 0u);
    std::vector<float> gathered(n, -1.0f);
    ASSERT_TRUE(nccl.AllGather(want.data(), n, gathered.data()).ok());
    EXPECT_EQ(Mismatches(gathered, want), 0u);

    // Queued on `compute`, like the Download behind Finish below.
    absl::StatusOr<cuda::DeviceBuffer> device = (*ctx)->Upload(want.data(), n);
    ASSERT_TRUE(device.ok()) << device.status();
    absl::Status started = nccl.Start(device->get(), n, compute);
    ASSERT_TRUE(started.ok()) << started;
    absl::Status finished = nccl.Finish(compute);
    ASSERT_TRUE(finished.ok()) << finished;
    std::vector<float> back(n, -1.0f);
    ASSERT_TRUE((*ctx)->Download(device->get(), n, back.data()).ok());
    EXPECT_EQ(Mismatches(back, want), 0u);
  }
  EXPECT_GE(nccl.busy_seconds(), 0.0);
  EXPECT_GE(nccl.waited_seconds(), 0.0);
}

TEST(NcclCollectiveTest, UsageErrorsLeaveTheCollectiveUsable) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "usage", 0, 1, {});
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCollective& nccl = **c;
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const cudaStream_t compute = (*ctx)->stream();
  const std::vector<float> want = Ramp(100, 1.0f);
  absl::StatusOr<cuda::DeviceBuffer> device = (*ctx)->Upload(want.data(), want.size());
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<float> host = want;

  EXPECT_EQ(nccl.Finish(compute).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(nccl.Start(device->get(), want.size(), compute).ok());
  EXPECT_EQ(nccl.Start(device->get(), want.size(), compute).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nccl.AllReduceSum(host.data(), host.size()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(nccl.Finish(compute).ok());
  EXPECT_EQ(nccl.AllReduceSum(nullptr, 4).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(nccl.AllReduceSum(host.data(), host.size()).ok());
  EXPECT_EQ(Mismatches(host, want), 0u);
}

TEST(NcclCollectiveTest, PeerThatNeverComesIsDeadlineExceeded) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  gloo::rendezvous::HashStore store;  // rank 0 never publishes the id
  NcclOptions options;
  options.timeout = std::chrono::seconds(1);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "absent", 1, 2, options);
  const double seconds = SecondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), "rank 1 of 2")) << c.status();
  EXPECT_LT(seconds, 3.0);
}

TEST(NcclCollectiveTest, PeerThatNeverJoinsNcclIsDeadlineExceeded) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  // Rank 0 publishes an id, then never joins: rank 1's setup waits in NCCL.
  gloo::rendezvous::HashStore store;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  store.set("silent/nccl_id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  NcclOptions options;
  options.timeout = std::chrono::seconds(1);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "silent", 1, 2, options);
  const double seconds = SecondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), "did not finish within 1000 ms"))
      << c.status();
  EXPECT_LT(seconds, 3.0);
}

// One rank of a two-GPU group: every operation at sizes 1, 1000 and 3M.
// Rank r holds (r + 1) * Ramp, so the sums are 3 * Ramp.
absl::Status RunPairRank(gloo::rendezvous::Store& store, int rank) {
  NcclOptions options;
  options.device = rank;
  options.timeout = std::chrono::seconds(30);
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> nccl,
                        NcclCollective::Connect(store, "pair", rank, 2, options));
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaContext> ctx, cuda::CudaContext::Create(rank));
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3'000'000}}) {
    const std::vector<float> mine = Ramp(n, static_cast<float>(rank + 1));
    const std::vector<float> sum = Ramp(n, 3.0f);
    std::vector<float> data = mine;
    LACT_RETURN_IF_ERROR(nccl->AllReduceSum(data.data(), n));
    LACT_RETURN_IF_ERROR(Expect(Mismatches(data, sum), absl::StrCat("host all-reduce of ", n)));

    std::vector<float> gathered(2 * n, -1.0f);
    LACT_RETURN_IF_ERROR(nccl->AllGather(mine.data(), n, gathered.data()));
    std::vector<float> both = Ramp(n, 1.0f);
    const std::vector<float> second = Ramp(n, 2.0f);
    both.insert(both.end(), second.begin(), second.end());
    LACT_RETURN_IF_ERROR(
        Expect(Mismatches(gathered, both), absl::StrCat("host all-gather of ", n)));

    // The upload is queued on the compute stream: Start must wait for it.
    LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer device, ctx->Upload(mine.data(), n));
    LACT_RETURN_IF_ERROR(nccl->Start(device.get(), n, ctx->stream()));
    LACT_RETURN_IF_ERROR(nccl->Finish(ctx->stream()));
    std::vector<float> back(n, -1.0f);
    LACT_RETURN_IF_ERROR(ctx->Download(device.get(), n, back.data()));
    LACT_RETURN_IF_ERROR(Expect(Mismatches(back, sum), absl::StrCat("device all-reduce of ", n)));
  }
  if (nccl->busy_seconds() <= 0) return absl::InternalError("no busy time measured");
  return absl::OkStatus();
}

TEST(NcclCollectiveTest, TwoRanksOnTwoGpusSum) {
  if (cuda::DeviceCount() < 2) {
    GTEST_SKIP() << "needs two CUDA devices (NCCL allows one rank per GPU)";
  }
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { statuses[r] = RunPairRank(store, r); });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
}

TEST(NcclCollectiveTest, StalledPeerBreaksTheCollective) {
  if (cuda::DeviceCount() < 2) {
    GTEST_SKIP() << "needs two CUDA devices (NCCL allows one rank per GPU)";
  }
  gloo::rendezvous::HashStore store;
  NcclOptions options;
  options.timeout = std::chrono::seconds(10);  // room for the setup; the stall then takes as long
  std::promise<void> rank1_done;
  std::shared_future<void> rank1_done_future = rank1_done.get_future().share();
  absl::Status rank0;
  std::thread peer([&] {
    // Rank 0 takes part in the first all-reduce, then stalls until rank 1 has seen the timeout.
    NcclOptions mine = options;
    mine.device = 0;
    absl::StatusOr<std::unique_ptr<NcclCollective>> c =
        NcclCollective::Connect(store, "stall", 0, 2, mine);
    if (!c.ok()) {
      rank0 = c.status();
      return;
    }
    std::vector<float> data = Ramp(1000, 1.0f);
    rank0 = (*c)->AllReduceSum(data.data(), data.size());
    rank1_done_future.wait();
  });
  options.device = 1;
  absl::StatusOr<std::unique_ptr<NcclCollective>> c =
      NcclCollective::Connect(store, "stall", 1, 2, options);
  std::vector<float> data = Ramp(1000, 2.0f);
  if (c.ok()) {
    EXPECT_TRUE((*c)->AllReduceSum(data.data(), data.size()).ok());
    const Clock::time_point start = Clock::now();
    // Rank 0 never joins this one.
    const absl::Status stalled = (*c)->AllReduceSum(data.data(), data.size());
    const double seconds = SecondsSince(start);
    EXPECT_EQ(stalled.code(), absl::StatusCode::kDeadlineExceeded) << stalled;
    EXPECT_TRUE(
        absl::StrContains(stalled.message(), "NCCL all-reduce of 1000 floats (rank 1 of 2)"))
        << stalled;
    EXPECT_TRUE(absl::StrContains(stalled.message(), "did not finish within 10000 ms")) << stalled;
    EXPECT_LT(seconds, 12.0);
    const absl::Status after = (*c)->AllReduceSum(data.data(), data.size());
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_TRUE(absl::StrContains(after.message(), "aborted after an earlier error")) << after;
    EXPECT_EQ((*c)->Finish(nullptr).code(), absl::StatusCode::kFailedPrecondition);
  }
  rank1_done.set_value();
  peer.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(rank0.ok()) << rank0;
}

}  // namespace
}  // namespace lact::testing
