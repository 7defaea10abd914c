// The coordinator's plain classes without a network: admission and
// sharding, the worker registry (models, leases, heartbeat expiry), the
// rendezvous KV, the job store (cancel, TTL, delete).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <thread>

#include "common/model.h"
#include "common/retention_text.h"
#include "server/fair_line.h"
#include "server/job_admission.h"
#include "server/job_journal.h"
#include "server/job_machine.h"
#include "server/job_spool.h"
#include "server/job_store.h"
#include "server/kv_store.h"
#include "server/tenant_tokens.h"
#include "server/worker_registry.h"

namespace lact::server {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

std::map<std::string, ModelConfig> Presets() { return {{"preset:small", *PresetConfig("small")}}; }

TEST(SplitContext, EvenContiguousShards) {
  const auto shards = SplitContext(10, 3);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards[0], std::make_pair(int64_t{0}, int64_t{4}));
  EXPECT_EQ(shards[1], std::make_pair(int64_t{4}, int64_t{3}));
  EXPECT_EQ(shards[2], std::make_pair(int64_t{7}, int64_t{3}));
}

TEST(PlanJob, DefaultsToEveryHoldingWorkerAndHonoursExplicitShards) {
  WorkerRegistry registry(milliseconds(1000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets()).ok());
  v1::JobSpec spec;
  spec.set_model("preset:small:3");
  spec.set_context_tokens(5);
  spec.set_token_width(256);
  spec.set_dtype(v1::BF16);
  absl::StatusOr<JobPlan> plan = PlanJob(spec, registry, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workers, 2);
  EXPECT_EQ(plan->dtype, WireType::kBF16);
  spec.add_shard_tokens(1);
  spec.add_shard_tokens(4);
  plan = PlanJob(spec, registry, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->shards[1], std::make_pair(int64_t{1}, int64_t{4}));
  AdmissionLimits small;
  small.max_context_tokens = 4;
  EXPECT_THAT(std::string(PlanJob(spec, registry, small).status().message()),
              HasSubstr("context_tokens 5 is out of range (allowed: 1..4)"));
}

TEST(PlanJob, BadPresetNamesAndShardSizesAreNamedBeforeAnyWorker) {
  WorkerRegistry registry(milliseconds(1000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets()).ok());
  v1::JobSpec spec;
  spec.set_context_tokens(37);
  spec.set_token_width(256);
  spec.set_dtype(v1::F32);
  for (const char* name : {"preset:small:abc", "preset:small:-1",
                           "preset:small:", "preset:small:1:2", "preset:small:+3"}) {
    spec.set_model(name);
    const absl::Status s = PlanJob(spec, registry, {}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("SEED an unsigned integer")) << name;
  }
  spec.set_model("preset:small:18446744073709551615");
  EXPECT_TRUE(PlanJob(spec, registry, {}).ok()) << "the largest seed";
  spec.add_shard_tokens(40);
  spec.add_shard_tokens(-3);
  EXPECT_THAT(std::string(PlanJob(spec, registry, {}).status().message()),
              HasSubstr("shard_tokens[1] = -3; every shard needs >= 1 token"));
}

TEST(CheckQuerySets, HugeCountsDoNotOverflowTheirSum) {
  // Found by tests/fuzz/job_spec_fuzz: the running sum once wrapped negative
  // and let these through.
  google::protobuf::RepeatedField<int64_t> tokens;
  tokens.Add(2068);
  tokens.Add(std::numeric_limits<int64_t>::max() - 127);
  const absl::Status status = CheckQuerySets(tokens, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("query sets hold more than 4194304 tokens"));
  tokens.Set(1, AdmissionLimits().max_query_tokens - 2068);
  EXPECT_TRUE(CheckQuerySets(tokens, {}).ok()) << "exactly the limit";
}

TEST(WorkerRegistry, MissedHeartbeatsMakeAWorkerUnhealthy) {
  WorkerRegistry registry(milliseconds(20));
  const std::string id = *registry.Register("a:1", "cpu", Presets());
  EXPECT_EQ(registry.CountHolding("preset:small"), 1);
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_EQ(registry.CountHolding("preset:small"), 0);
  EXPECT_EQ(registry.FindModel("preset:small").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(registry.Heartbeat(id));
  EXPECT_EQ(registry.CountHolding("preset:small"), 1);
  EXPECT_FALSE(registry.Heartbeat("w999"));
  registry.MarkFailed("a:1");
  EXPECT_EQ(registry.CountHolding("preset:small"), 0);
}

TEST(WorkerRegistry, LeasesAreExclusiveAndWaitForRelease) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets()).ok());
  absl::StatusOr<std::vector<std::string>> first =
      registry.Acquire("preset:small", 2, milliseconds(0));
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::vector<std::string>> second =
      registry.Acquire("preset:small", 1, milliseconds(30));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("0 are free"));
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(30));
    registry.Release(*first);
  });
  second = registry.Acquire("preset:small", 1, milliseconds(5000));
  releaser.join();
  EXPECT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(std::string(registry.FindModel("other").status().message()),
              HasSubstr("unknown model 'other' (available: preset:small"));
}

// A worker that stages takes a second job only once the first is in line
// there, never a third, and idle workers go first.
TEST(WorkerRegistry, AStagingWorkerTakesOneJobBehindTheOneInLine) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets(), "", /*stages=*/true).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets(), "", /*stages=*/true).ok());
  const auto acquire = [&](const std::string& job, int count, milliseconds wait) {
    WorkerRegistry::Wait w{wait};
    w.job = job;
    return registry.Acquire("preset:small", count, w);
  };
  absl::StatusOr<std::vector<std::string>> a = acquire("A", 2, milliseconds(0));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(acquire("B", 2, milliseconds(30)).status().code(), absl::StatusCode::kResourceExhausted)
      << "A is not in line on its workers yet";
  registry.InLine("a:1", "A");
  EXPECT_EQ(acquire("B", 2, milliseconds(30)).status().code(), absl::StatusCode::kResourceExhausted)
      << "A is in line on one of the two";
  registry.InLine("b:2", "A");
  absl::StatusOr<std::vector<std::string>> b = acquire("B", 2, milliseconds(0));
  ASSERT_TRUE(b.ok()) << b.status();
  registry.InLine("a:1", "B");
  registry.InLine("b:2", "B");
  EXPECT_EQ(acquire("C", 1, milliseconds(30)).status().code(), absl::StatusCode::kResourceExhausted)
      << "two jobs per worker at most";
  registry.Release(*a, "A");
  absl::StatusOr<std::vector<std::string>> c = acquire("C", 1, milliseconds(0));
  EXPECT_TRUE(c.ok()) << "B computes now, and C may wait behind it: " << c.status();
  registry.Release(*b, "B");
  ASSERT_TRUE(registry.Register("c:3", "cpu", Presets(), "", /*stages=*/true).ok());
  absl::StatusOr<std::vector<std::string>> d = acquire("D", 1, milliseconds(0));
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->front(), c->front()) << "an idle worker before one that computes";
}

// A job is staged only behind one and the same job on all its workers, and
// never on some idle workers and some busy ones: its ranks start together.
TEST(WorkerRegistry, AJobIsStagedBehindOneJobOnAllItsWorkersOrNotAtAll) {
  WorkerRegistry registry(milliseconds(10000));
  for (const char* a : {"a:1", "b:2", "c:3"})
    ASSERT_TRUE(registry.Register(a, "cpu", Presets(), "", /*stages=*/true).ok());
  const auto acquire = [&](const std::string& job, int count, milliseconds wait) {
    WorkerRegistry::Wait w{wait};
    w.job = job;
    return registry.Acquire("preset:small", count, w);
  };
  absl::StatusOr<std::vector<std::string>> a = acquire("A", 1, milliseconds(0));
  absl::StatusOr<std::vector<std::string>> b = acquire("B", 1, milliseconds(0));
  ASSERT_TRUE(a.ok() && b.ok());
  registry.InLine(a->front(), "A");
  registry.InLine(b->front(), "B");
  EXPECT_EQ(acquire("C", 2, milliseconds(30)).status().code(), absl::StatusCode::kResourceExhausted)
      << "one idle worker and one behind A, or one behind A and one behind B: neither";
  registry.Release(*b, "B");
  absl::StatusOr<std::vector<std::string>> c = acquire("C", 2, milliseconds(0));
  ASSERT_TRUE(c.ok()) << "two idle workers: " << c.status();
  EXPECT_THAT(*c, ::testing::Not(::testing::Contains(a->front())));
}

TEST(WorkerRegistry, AWorkerThatDoesNotStageTakesOneJobAtATime) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  WorkerRegistry::Wait first{milliseconds(0)}, second{milliseconds(30)};
  first.job = "A";
  second.job = "B";
  ASSERT_TRUE(registry.Acquire("preset:small", 1, first).ok());
  registry.InLine("a:1", "A");
  EXPECT_EQ(registry.Acquire("preset:small", 1, second).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(WorkerRegistry, WaitersAreServedFirstComeFirstServed) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets()).ok());
  absl::StatusOr<std::vector<std::string>> held =
      registry.Acquire("preset:small", 2, milliseconds(0));
  ASSERT_TRUE(held.ok());
  // A job for both workers waits first; a later one-worker job must not
  // overtake it when one worker frees up.
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<int> big_positions, small_positions;
  std::atomic<int> waiting{0};
  auto waiter = [&](const std::string& name, int count, std::vector<int>* positions) {
    WorkerRegistry::Wait wait{milliseconds(10000), 64, nullptr, [&, positions](int p) {
                                std::lock_guard<std::mutex> lock(mu);
                                if (positions->empty()) ++waiting;
                                positions->push_back(p);
                              }};
    absl::StatusOr<std::vector<std::string>> got = registry.Acquire("preset:small", count, wait);
    ASSERT_TRUE(got.ok()) << got.status();
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(name);
    }
    registry.Release(*got);
  };
  std::thread big(waiter, "big", 2, &big_positions);
  while (waiting < 1) std::this_thread::sleep_for(milliseconds(1));
  std::thread small(waiter, "small", 1, &small_positions);
  while (waiting < 2) std::this_thread::sleep_for(milliseconds(1));
  registry.Release({held->at(0)});
  std::this_thread::sleep_for(milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty()) << "the one-worker job overtook the job in front of it";
  }
  registry.Release({held->at(1)});
  big.join();
  small.join();
  EXPECT_EQ(order, (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(big_positions, (std::vector<int>{1}));
  EXPECT_EQ(small_positions.front(), 2) << "it waited behind the first";
}

TEST(FairLine, FirstComeFirstServedWithinATenantRoundRobinAcross) {
  FairLine line;
  const uint64_t a1 = line.Join("a"), a2 = line.Join("a"), a3 = line.Join("a"), b1 = line.Join("b");
  EXPECT_EQ(line.size(), 4);
  // Neither tenant served yet: a's first job came first, then b's one job
  // goes before a's second.
  EXPECT_EQ(line.Position(a1), 1);
  EXPECT_EQ(line.Position(b1), 2);
  EXPECT_EQ(line.Position(a2), 3);
  EXPECT_EQ(line.Position(a3), 4);
  line.Served(a1);
  EXPECT_EQ(line.Position(a1), 0) << "served jobs leave the line";
  EXPECT_EQ(line.Position(b1), 1) << "a was just served: b's turn";
  EXPECT_EQ(line.Position(a2), 2);
  EXPECT_EQ(line.Position(a3), 3);
  line.Served(b1);
  EXPECT_EQ(line.Position(a2), 1);
  const uint64_t c1 = line.Join("c");
  EXPECT_EQ(line.Position(c1), 2) << "a newcomer joins the rotation at its back";
  EXPECT_EQ(line.Position(a2), 1);
  EXPECT_EQ(line.Position(a3), 3);
  line.Served(a2);
  EXPECT_EQ(line.Position(c1), 1) << "then takes its turn";
  line.Leave(c1);
  EXPECT_EQ(line.Position(a3), 1);
  EXPECT_EQ(line.size(), 1);
  line.Served(a3);
  EXPECT_EQ(line.size(), 0);
  const uint64_t only = line.Join("");
  EXPECT_EQ(line.Position(only), 1) << "the default tenant is a tenant";
}

TEST(WorkerRegistry, TenantsTakeTurns) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  absl::StatusOr<std::vector<std::string>> held =
      registry.Acquire("preset:small", 1, milliseconds(0));
  ASSERT_TRUE(held.ok());
  std::mutex mu;
  std::vector<std::string> order;
  std::atomic<int> in_line{0};
  std::vector<std::thread> jobs;
  const auto submit = [&](const std::string& tenant, const std::string& name) {
    jobs.emplace_back([&, tenant, name] {
      bool counted = false;
      WorkerRegistry::Wait wait{milliseconds(10000), 64, nullptr,
                                [&](int) {
                                  if (!counted) ++in_line;
                                  counted = true;
                                },
                                tenant};
      absl::StatusOr<std::vector<std::string>> got = registry.Acquire("preset:small", 1, wait);
      ASSERT_TRUE(got.ok()) << got.status();
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(name);
      }
      registry.Release(*got);
    });
    const int expected = static_cast<int>(jobs.size());
    while (in_line < expected) std::this_thread::sleep_for(milliseconds(1));
  };
  for (const char* name : {"a1", "a2", "a3"}) submit("pipeline-a", name);
  submit("pipeline-b", "b1");
  registry.Release(*held);
  for (std::thread& t : jobs) t.join();
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "a3"}))
      << "b's one job waits for a's first, not for all of a's";
}

TEST(WorkerRegistry, FullQueueAndCancelledWaiters) {
  WorkerRegistry registry(milliseconds(10000));
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  absl::StatusOr<std::vector<std::string>> held =
      registry.Acquire("preset:small", 1, milliseconds(0));
  ASSERT_TRUE(held.ok());
  std::atomic<bool> leave{false}, in_line{false};
  std::thread waiter([&] {
    WorkerRegistry::Wait wait{milliseconds(10000), 1, [&] { return leave.load(); },
                              [&](int) { in_line = true; }};
    absl::StatusOr<std::vector<std::string>> got = registry.Acquire("preset:small", 1, wait);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  });
  while (!in_line) std::this_thread::sleep_for(milliseconds(1));
  absl::StatusOr<std::vector<std::string>> refused =
      registry.Acquire("preset:small", 1, {milliseconds(10000), 1});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the queue is full: 1 jobs already wait"));
  leave = true;
  registry.WakeWaiters();  // no timer looks: without this the waiter stays 10 s
  waiter.join();
  registry.Release(*held);
  EXPECT_TRUE(registry.Acquire("preset:small", 1, {milliseconds(1000), 1}).ok())
      << "the cancelled one left the line";
}

TEST(KvStore, GetWaitsForKeysAndTimesOut) {
  KvStore kv;
  kv.BeginAttempt("job", 0);
  kv.BeginAttempt("other", 0);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_TRUE(kv.Set("job/0/a", "1").ok());
  });
  absl::StatusOr<std::vector<std::string>> got = kv.Get({"job/0/a"}, milliseconds(5000));
  setter.join();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->at(0), "1");
  EXPECT_EQ(kv.Get({"job/0/b"}, milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(kv.Set("other/0/c", "2").ok());
  kv.EndJob("job");
  EXPECT_EQ(kv.size(), 1u);
  EXPECT_EQ(kv.Set("job/0/a", "1").code(), absl::StatusCode::kFailedPrecondition)
      << "an ended job's keys are refused";
}

TEST(KvStore, ADeadAttemptNeitherMeetsNorWaitsForTheNext) {
  KvStore kv;
  kv.BeginAttempt("job", 0);
  ASSERT_TRUE(kv.Set("job/0/rank0", "addr").ok());
  // A shard of attempt 0 waits for a peer that died.
  absl::Status waited;
  std::chrono::steady_clock::duration took{};
  std::thread dead_shard([&] {
    const auto start = std::chrono::steady_clock::now();
    waited = kv.Get({"job/0/rank1"}, milliseconds(30000)).status();
    took = std::chrono::steady_clock::now() - start;
  });
  std::this_thread::sleep_for(milliseconds(50));
  kv.BeginAttempt("job", 1);
  dead_shard.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kFailedPrecondition) << waited;
  EXPECT_THAT(std::string(waited.message()), HasSubstr("attempt 0 of job 'job' is over"));
  EXPECT_LT(took, std::chrono::seconds(5)) << "woken when the next attempt began";
  EXPECT_EQ(kv.size(), 0u) << "the dead attempt's keys are gone";
  EXPECT_EQ(kv.Set("job/0/rank1", "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(kv.Set("job/1/rank1", "addr").ok());
  EXPECT_EQ(kv.Get({"job/0/rank1"}, milliseconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Set("unknown/0/x", "v").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JobSpool, FilesAreBoundedInBytesAndLeftoversCleared) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/lact_spool_", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/job-old.spool.npy") << "a previous coordinator's";
  std::ofstream(dir + "/keep.txt") << "not a spool file";
  // 100 tokens of width 4: 1,600 bytes as float32, 800 as bf16.
  JobSpool spool(dir, 2500);
  ASSERT_TRUE(spool.Open().ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/job-old.spool.npy"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/keep.txt"));
  absl::StatusOr<std::string> a = spool.Create("job-a", 100, 4, WireType::kF32);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(std::filesystem::exists(*a));
  absl::StatusOr<std::string> b = spool.Create("job-b", 100, 4, WireType::kF32);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("--spool-bytes"));
  ASSERT_TRUE(spool.Create("job-c", 100, 4, WireType::kBF16).ok()) << "800 more bytes fit";
  EXPECT_EQ(spool.used_bytes(), 2400);
  spool.Remove("job-a");
  EXPECT_FALSE(std::filesystem::exists(*a));
  EXPECT_EQ(spool.used_bytes(), 800);
  EXPECT_TRUE(spool.Create("job-b", 100, 4, WireType::kF32).ok());
  EXPECT_EQ(JobSpool("", 1).Create("job-d", 1, 1, WireType::kF32).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove_all(dir);
}

TEST(JobStore, RecordsAreBoundedDroppingEndedJobsOldestFirst) {
  JobStore jobs(std::chrono::hours(1), /*max_records=*/2);
  v1::JobSpec spec;
  spec.set_model("preset:small");
  const std::string ended = *jobs.Create(spec);
  jobs.SetCanceller(ended, [](CancelCause) { return false; });
  jobs.Finish(ended, v1::JobInfo::SUCCEEDED, "", {});
  jobs.SetCanceller(ended, nullptr);
  const std::string live = *jobs.Create(spec);
  const std::string newest = *jobs.Create(spec);  // drops `ended`
  EXPECT_EQ(jobs.Get(ended).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs.Get(live).ok());
  absl::StatusOr<std::string> refused = jobs.Create(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("2 jobs that have not ended, its limit (--max-job-records)"));
  EXPECT_TRUE(jobs.Get(newest).ok());
}

// A coordinator restarted (a new registry) where worker b registers again
// first: a's heartbeat with its old id must not be taken for b's.
TEST(WorkerRegistry, IdsFromBeforeARestartAreUnknown) {
  const auto interval = std::chrono::milliseconds(1000);
  WorkerRegistry before(interval), after(interval);
  const std::string a = *before.Register("127.0.0.1:1", "cpu", {});
  ASSERT_TRUE(before.Register("127.0.0.1:2", "cpu", {}).ok());
  const std::string b = *after.Register("127.0.0.1:2", "cpu", {});
  EXPECT_NE(a, b);
  EXPECT_FALSE(after.Heartbeat(a)) << "a must register again";
  EXPECT_TRUE(after.Heartbeat(b));
}

TEST(WorkerRegistry, EntriesAreBoundedDroppingSilentWorkers) {
  WorkerRegistry registry(milliseconds(20), /*max_workers=*/2);
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("b:2", "cpu", Presets()).ok());
  ASSERT_TRUE(registry.Register("a:1", "cpu", Presets()).ok()) << "re-registering is not new";
  absl::StatusOr<std::string> refused = registry.Register("c:3", "cpu", Presets());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("its limit (--max-workers)"));
  std::this_thread::sleep_for(milliseconds(100));  // a and b fall silent
  absl::StatusOr<std::string> c = registry.Register("c:3", "cpu", Presets());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(registry.CountHolding("preset:small"), 1) << "a and b were dropped";
}

// With their JobRecord, a running and a queued job stay live across a
// restart, to be taken back: the running one's held shards of its
// recorded attempt are wanted until it follows them (Adopted), no other
// attempt's; a Submit made again finds the job by its request_id.
TEST(JobStore, LiveJobsWithARecordAreTakenBackAfterARestart) {
  const std::string dir = ::testing::TempDir() + "/lact_taken_back_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  v1::JobSpec spec;
  spec.set_model("preset:small");
  spec.set_tenant("t");
  std::string running, queued;
  {
    absl::StatusOr<std::unique_ptr<JobJournal>> journal = JobJournal::Open(dir);
    ASSERT_TRUE(journal.ok()) << journal.status();
    JobStore jobs;
    ASSERT_TRUE(jobs.Restore(journal->get()).ok());
    spec.set_request_id("first-submission");
    running = *jobs.Create(spec);
    jobs.Start(running, v1::JobAccepted(), "ticket");
    JobRecord record;
    *record.mutable_spec() = spec;
    record.set_attempt(1);
    record.add_workers("w:1");
    jobs.SetRecord(running, record);
    spec.set_request_id("second-submission");
    queued = *jobs.Create(spec);
    record.set_attempt(-1);
    record.clear_workers();
    *record.mutable_spec() = spec;
    jobs.SetRecord(queued, record);
  }
  absl::StatusOr<std::unique_ptr<JobJournal>> journal = JobJournal::Open(dir);
  ASSERT_TRUE(journal.ok()) << journal.status();
  JobStore jobs;
  ASSERT_TRUE(jobs.Restore(journal->get()).ok());
  const std::vector<RestoredJob> restored = jobs.TakeRestored();
  ASSERT_EQ(restored.size(), 2u);
  EXPECT_EQ(restored[0].info.job_id(), running);
  EXPECT_EQ(restored[0].info.status(), v1::JobInfo::RUNNING);
  EXPECT_EQ(restored[0].record.attempt(), 1);
  EXPECT_EQ(restored[1].info.status(), v1::JobInfo::QUEUED);
  EXPECT_TRUE(jobs.WantsHeldShard(running, 1));
  EXPECT_FALSE(jobs.WantsHeldShard(running, 0)) << "an earlier attempt's shards are let go";
  EXPECT_FALSE(jobs.WantsHeldShard(queued, -1));
  jobs.Adopted(running);
  EXPECT_FALSE(jobs.WantsHeldShard(running, 1));
  EXPECT_EQ(jobs.FindRequest("t", "first-submission"), running);
  EXPECT_EQ(jobs.FindRequest("t", "second-submission"), queued);
  EXPECT_EQ(jobs.FindRequest("other", "first-submission"), std::nullopt)
      << "a request id is its tenant's";
  EXPECT_TRUE(jobs.TakeRestored().empty()) << "taken once";
  std::filesystem::remove_all(dir);
}

TEST(JobStore, RecordsAndRetainedStatesOutliveTheStoreThroughItsJournal) {
  const std::string dir = ::testing::TempDir() + "/lact_journal_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  v1::JobSpec spec;
  spec.set_model("preset:small");
  spec.set_tenant("t");
  std::string kept, running, deleted;
  {
    absl::StatusOr<std::unique_ptr<JobJournal>> journal = JobJournal::Open(dir);
    ASSERT_TRUE(journal.ok()) << journal.status();
    JobStore jobs;
    ASSERT_TRUE(jobs.Restore(journal->get()).ok());
    kept = *jobs.Create(spec);
    jobs.Finish(kept, v1::JobInfo::SUCCEEDED, "", {});
    jobs.Retain(kept, std::make_shared<RetainedState>(RetainedState{"preset:small", "w:1"}), true,
                true, std::chrono::seconds(3600));
    running = *jobs.Create(spec);
    jobs.Start(running, v1::JobAccepted());
    deleted = *jobs.Create(spec);
    jobs.Finish(deleted, v1::JobInfo::SUCCEEDED, "", {});
    ASSERT_TRUE(jobs.Delete(deleted).ok());
  }
  // A new store over the same file: what a restarted coordinator sees.
  absl::StatusOr<std::unique_ptr<JobJournal>> journal = JobJournal::Open(dir);
  ASSERT_TRUE(journal.ok()) << journal.status();
  JobStore jobs;
  ASSERT_TRUE(jobs.Restore(journal->get()).ok());
  absl::StatusOr<v1::JobInfo> info = jobs.Get(kept);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->status(), v1::JobInfo::SUCCEEDED);
  EXPECT_EQ(info->tenant(), "t");
  EXPECT_TRUE(info->state_retained());
  absl::StatusOr<std::shared_ptr<const RetainedState>> state = jobs.State(kept);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->model, "preset:small");
  EXPECT_EQ((*state)->worker, "w:1");
  absl::StatusOr<v1::JobInfo> lost = jobs.Get(running);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->status(), v1::JobInfo::FAILED);
  EXPECT_THAT(lost->error(), HasSubstr("was RUNNING when the coordinator stopped"));
  EXPECT_EQ(jobs.Get(deleted).status().code(), absl::StatusCode::kNotFound);
  const std::string next = *jobs.Create(spec);
  const std::vector<v1::JobInfo> listed = jobs.List();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].job_id(), kept);
  EXPECT_EQ(listed[2].job_id(), next) << "new jobs come after the restored ones";
  std::filesystem::remove_all(dir);
}

TEST(KvStore, KeysValuesAndTotalBytesAreBounded) {
  KvStore kv(/*max_bytes=*/100);
  kv.BeginAttempt("job", 0);
  EXPECT_EQ(kv.Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(std::string(KvStore::kMaxKeyBytes + 1, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status big = kv.Set("job/0/a", std::string(KvStore::kMaxValueBytes + 1, 'v'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.message()), HasSubstr("values up to 65536"));
  ASSERT_TRUE(kv.Set("job/0/a", std::string(58, 'v')).ok());  // 65 bytes
  ASSERT_TRUE(kv.Set("job/0/a", std::string(88, 'v')).ok());  // replaces: 95 bytes
  const absl::Status full = kv.Set("job/0/b", std::string(10, 'v'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("holds 95 bytes, its limit is 100"));
  kv.BeginAttempt("job", 1);
  EXPECT_TRUE(kv.Set("job/1/b", std::string(88, 'v')).ok()) << "erased keys free their bytes";
}

TEST(TenantTokens, FileErrorsNameTheLine) {
  const std::string path = ::testing::TempDir() + "/lact_tokens_units";
  const auto error_of = [&](const std::string& text) {
    std::ofstream(path) << text;
    return std::string(TenantTokens::FromFile(path).status().message());
  };
  EXPECT_THAT(error_of("# only a comment\n"), HasSubstr("lists no tokens"));
  EXPECT_THAT(error_of("a 0123456789abcdef extra\n"), HasSubstr("line 1: want 'TENANT TOKEN'"));
  EXPECT_THAT(error_of("\na short\n"), HasSubstr("line 2: the token is 5 bytes; need at least 16"));
  EXPECT_THAT(error_of("a/b 0123456789abcdef\n"), HasSubstr("line 1: the tenant must be"));
  EXPECT_THAT(error_of("a 0123456789abcdef\nb 0123456789abcdef\n"),
              HasSubstr("line 2: the token is already given to tenant a"));
  std::ofstream(path) << "a 0123456789abcdef\n";
  EXPECT_TRUE(TenantTokens::FromFile(path).ok());
  EXPECT_EQ(TenantTokens::FromFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(JobStore, QueuedRunningCancelRetainExpireDelete) {
  JobStore jobs;
  v1::JobSpec spec;
  spec.set_model("m");
  const std::string id = *jobs.Create(spec);
  EXPECT_EQ(jobs.Get(id)->status(), v1::JobInfo::QUEUED);
  EXPECT_GT(jobs.Get(id)->submitted_unix_seconds(), 1.7e9);
  EXPECT_EQ(jobs.Cancel(id).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a job without a canceller cannot be stopped yet";
  JobMachine machine(id);
  jobs.SetCanceller(id, [&](CancelCause cause) { return machine.Cancel(cause); });
  v1::JobAccepted accepted;
  accepted.add_shards()->set_worker("a:1");
  accepted.add_shards()->set_worker("b:2");
  accepted.set_ticket("secret");
  jobs.Start(id, accepted);
  EXPECT_EQ(jobs.Get(id)->status(), v1::JobInfo::RUNNING);
  EXPECT_EQ(jobs.Get(id)->workers(), 2);
  EXPECT_EQ(jobs.Get(id)->accepted().ticket(), "secret");
  ASSERT_TRUE(jobs.Cancel(id).ok());
  EXPECT_TRUE(machine.cancel_requested());
  EXPECT_EQ(jobs.Get(id)->status(), v1::JobInfo::CANCELLED);
  EXPECT_EQ(jobs.Cancel(id).status().code(), absl::StatusCode::kFailedPrecondition);
  jobs.Finish(id, v1::JobInfo::FAILED, "later error", {});
  EXPECT_EQ(jobs.Get(id)->status(), v1::JobInfo::CANCELLED) << "the first ending wins";
  EXPECT_GT(jobs.Get(id)->finished_unix_seconds(), 0);

  // A job whose machine ended before CancelJob arrived is not reported cancelled.
  const std::string ended = *jobs.Create(spec);
  JobMachine finished(ended);
  finished.QueueFailed(absl::ResourceExhaustedError("full"));
  jobs.SetCanceller(ended, [&](CancelCause cause) { return finished.Cancel(cause); });
  EXPECT_EQ(jobs.Cancel(ended).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jobs.Get(ended)->status(), v1::JobInfo::QUEUED) << "its flow reports how it ended";

  const std::string done = *jobs.Create(spec);
  jobs.Start(done, accepted);
  jobs.Finish(done, v1::JobInfo::SUCCEEDED, "", {});
  EXPECT_EQ(jobs.State(done).status().code(), absl::StatusCode::kFailedPrecondition);
  jobs.Retain(done, std::make_shared<RetainedState>(), true, true, std::chrono::seconds(0));
  jobs.Expire();
  EXPECT_FALSE(jobs.Get(done)->state_retained());
  EXPECT_FALSE(jobs.Get(done)->results_retained());
  jobs.Retain(done, std::make_shared<RetainedState>(), true, true, std::chrono::seconds(60));
  EXPECT_TRUE(jobs.State(done).ok());
  EXPECT_TRUE(jobs.Get(done)->results_retained());
  absl::StatusOr<v1::JobInfo> deleted = jobs.Delete(done);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->status(), v1::JobInfo::SUCCEEDED);
  ASSERT_EQ(deleted->accepted().shards_size(), 2)
      << "where its workers are, to tell them to forget it";
  EXPECT_EQ(deleted->accepted().shards(1).worker(), "b:2");
  EXPECT_EQ(jobs.Get(done).status().code(), absl::StatusCode::kNotFound);

  // Deleting a queued job cancels it.
  const std::string queued = *jobs.Create(spec);
  const JobStore::Counts counts = jobs.Count();
  EXPECT_EQ(counts.by_status.at(v1::JobInfo::QUEUED), 2) << "`ended` and `queued`";
  EXPECT_EQ(counts.by_status.at(v1::JobInfo::CANCELLED), 1);
  EXPECT_EQ(counts.by_status.count(v1::JobInfo::SUCCEEDED), 0u) << "`done` was deleted";
  EXPECT_EQ(counts.retained_states, 0);
  JobMachine waiting(queued);
  jobs.SetCanceller(queued, [&](CancelCause cause) { return waiting.Cancel(cause); });
  ASSERT_TRUE(jobs.Delete(queued).ok());
  EXPECT_EQ(waiting.outcome(),
            absl::CancelledError(absl::StrCat("job ", queued, " cancelled: deleted by DeleteJob")));
}

// What the workers report dropping turns *_retained false and says why in
// their words; a query of the job is refused with the same reason.
TEST(JobStore, DroppedResultsSayWhyInTheWorkersWords) {
  JobStore jobs;
  v1::JobSpec spec;
  const std::string id = *jobs.Create(spec);
  jobs.Finish(id, v1::JobInfo::SUCCEEDED, "", {});
  jobs.Retain(id, std::make_shared<RetainedState>(), true, true, std::chrono::seconds(60));
  EXPECT_TRUE(jobs.Get(id)->results_dropped().empty());
  const std::string outputs_gone = "dropped: they reached the job's client";
  EXPECT_TRUE(jobs.Get(id)->outputs_retained());
  jobs.ResultsDropped(id, false, outputs_gone);
  EXPECT_FALSE(jobs.Get(id)->outputs_retained());
  EXPECT_TRUE(jobs.Get(id)->results_retained())
      << "the query outputs and state can still be fetched (without_outputs)";
  EXPECT_TRUE(jobs.Get(id)->state_retained()) << "rank 0 still keeps the state";
  EXPECT_EQ(jobs.Get(id)->results_dropped(), outputs_gone);
  EXPECT_TRUE(jobs.State(id).ok());
  jobs.ResultsDropped(id, false, "evicted: on another rank");
  EXPECT_EQ(jobs.Get(id)->results_dropped(), outputs_gone) << "the first reason stays";
  const std::string evicted = "evicted: the worker's retained results reached its --retain-bytes 9";
  jobs.ResultsDropped(id, true, evicted);
  EXPECT_FALSE(jobs.Get(id)->state_retained());
  EXPECT_FALSE(jobs.Get(id)->results_retained()) << "nothing left to fetch";
  EXPECT_EQ(jobs.Get(id)->results_dropped(), evicted) << "the state's reason wins";
  EXPECT_EQ(jobs.State(id).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(jobs.State(id).status().message()), HasSubstr(evicted));

  const std::string expires = *jobs.Create(spec);
  jobs.Finish(expires, v1::JobInfo::SUCCEEDED, "", {});
  jobs.Retain(expires, std::make_shared<RetainedState>(), true, true, std::chrono::seconds(0));
  EXPECT_THAT(std::string(jobs.State(expires).status().message()), HasSubstr(kRetentionExpired));
  jobs.Expire();
  EXPECT_EQ(jobs.Get(expires)->results_dropped(), kRetentionExpired);
  jobs.Retain(expires, std::make_shared<RetainedState>(), true, true, std::chrono::seconds(60));
  EXPECT_TRUE(jobs.Get(expires)->results_dropped().empty()) << "retained again";
}

TEST(JobStore, ForgetsFinishedRecordsAfterTheirTtl) {
  JobStore jobs(std::chrono::seconds(0));
  v1::JobSpec spec;
  const std::string done = *jobs.Create(spec), running = *jobs.Create(spec);
  jobs.Finish(done, v1::JobInfo::FAILED, "boom", {});
  jobs.Expire();
  EXPECT_EQ(jobs.Get(done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs.Get(running).ok()) << "a queued job is never forgotten";
  const std::string kept = *jobs.Create(spec);
  jobs.Finish(kept, v1::JobInfo::SUCCEEDED, "", {});
  jobs.Retain(kept, std::make_shared<RetainedState>(), false, false, std::chrono::seconds(60));
  jobs.Expire();
  EXPECT_TRUE(jobs.Get(kept).ok()) << "kept while its state is retained";
}

}  // namespace
}  // namespace lact::server
