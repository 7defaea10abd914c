// A job's run without a network: scripted workers behind a fake
// JobTransport (the way LevelDB tests through EnvWrapper), with the real
// registry, rendezvous store and job records. Who is blamed when a worker
// is gone or stalls, when the job runs again and on whom, what bounds its
// attempts, and how its ranks' statistics add up.
#include "server/job_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/model.h"

namespace lact::server {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// One rank of a scripted attempt: the messages its worker sends, then how
// its stream ends. A silent rank sends nothing more and ends only when the
// attempt is cancelled, as a stopped worker's stream does.
struct ScriptedRank {
  std::vector<v1::RunShardResponse> messages;
  RankEnd end{absl::OkStatus(), true};
  absl::Duration after = absl::ZeroDuration();  // before the end comes
  bool silent = false;
  std::function<void()> before_end;  // e.g. the client goes away
};

v1::RunShardResponse Done(double compute, double allreduce, double waited) {
  v1::RunShardResponse r;
  v1::ShardDone* d = r.mutable_done();
  d->set_compute_seconds(compute);
  d->set_allreduce_seconds(allreduce);
  d->set_allreduce_waited_seconds(waited);
  d->set_upload_seconds(compute / 10);
  d->set_context_bytes(1000000);
  d->set_results_delivered(true);
  d->set_peak_rss_bytes(1 << 20);
  return r;
}

ScriptedRank Succeeds(double compute = 1) { return {.messages = {Done(compute, 0, 0)}}; }
ScriptedRank ReportsGroupBroken(absl::Duration after = absl::ZeroDuration()) {
  return {.end = {absl::UnavailableError("gloo all-reduce failed, a peer is gone"), true},
          .after = after};
}
ScriptedRank ReportsGroupTimedOut() {
  return {.end = {absl::DeadlineExceededError("gloo all-reduce timed out"), true}};
}
ScriptedRank Gone(absl::Duration after) {
  return {.end = {absl::UnavailableError("Socket closed"), false}, .after = after};
}
ScriptedRank Silent() { return {.silent = true}; }

class FakeStreams final : public AttemptStreams {
 public:
  FakeStreams(std::vector<std::string> addresses, std::vector<ScriptedRank> ranks)
      : addresses_(std::move(addresses)), ranks_(std::move(ranks)), read_(ranks_.size(), 0) {}

  absl::Status Open(const std::vector<v1::ShardSpec>& specs,
                    std::chrono::system_clock::time_point) override {
    specs_ = specs;
    return absl::OkStatus();
  }
  bool Read(int rank, v1::RunShardResponse* response) override {
    ScriptedRank& r = ranks_[rank];
    if (read_[rank] < r.messages.size()) {
      *response = r.messages[read_[rank]++];
      return true;
    }
    absl::MutexLock lock(&mu_);
    if (r.silent) {
      mu_.Await(absl::Condition(&cancelled_));
    } else {
      mu_.AwaitWithTimeout(absl::Condition(&never_), r.after);
    }
    return false;
  }
  RankEnd Finish(int rank) override {
    ScriptedRank& r = ranks_[rank];
    if (r.before_end) r.before_end();
    if (r.silent) return {absl::CancelledError("Cancelled"), false};
    return r.end;
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  int size() const override { return static_cast<int>(addresses_.size()); }
  const std::string& address(int rank) const override { return addresses_[rank]; }
  int broken_rank() const override { return -1; }

  const std::vector<v1::ShardSpec>& specs() const { return specs_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  const std::vector<std::string> addresses_;
  std::vector<ScriptedRank> ranks_;
  std::vector<size_t> read_;
  std::vector<v1::ShardSpec> specs_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool never_ ABSL_GUARDED_BY(mu_) = false;
};

// Hands out one scripted attempt per Streams call, and keeps them.
class FakeTransport final : public JobTransport {
 public:
  explicit FakeTransport(std::vector<std::vector<ScriptedRank>> attempts)
      : scripts_(attempts.begin(), attempts.end()) {}

  std::shared_ptr<AttemptStreams> Streams(std::vector<std::string> addresses) override {
    EXPECT_FALSE(scripts_.empty()) << "more attempts than scripted";
    std::vector<ScriptedRank> ranks = scripts_.empty()
                                          ? std::vector<ScriptedRank>(addresses.size(), Succeeds())
                                          : scripts_.front();
    if (!scripts_.empty()) scripts_.pop_front();
    attempts.push_back(std::make_shared<FakeStreams>(std::move(addresses), std::move(ranks)));
    return attempts.back();
  }
  std::shared_ptr<AttemptStreams> Follow(std::vector<std::string> addresses, const std::string&,
                                         int attempt) override {
    followed.push_back(attempt);
    return Streams(std::move(addresses));
  }
  void Forget(const std::string& job_id, const std::string&,
              const std::vector<std::string>& workers) override {
    forgotten.insert(forgotten.end(), workers.begin(), workers.end());
  }

  std::vector<int> followed;  // the attempts followed again, in order
  std::vector<std::shared_ptr<FakeStreams>> attempts;
  std::vector<std::string> forgotten;

 private:
  std::deque<std::vector<ScriptedRank>> scripts_;
};

class FakeCall final : public JobCall {
 public:
  bool Write(const v1::SubmitResponse& response) override {
    if (ended_) return false;
    written.push_back(response);
    return true;
  }
  bool ended() const override { return ended_; }
  bool EndsWithin(absl::Duration) const override { return ended_; }
  std::chrono::system_clock::time_point deadline() const override { return deadline_; }

  void End() { ended_ = true; }
  std::vector<v1::SubmitResponse> written;

 private:
  std::atomic<bool> ended_{false};
  const std::chrono::system_clock::time_point deadline_ =
      std::chrono::system_clock::now() + std::chrono::hours(1);
};

// A coordinator's records with `workers` registered, and a job of two
// ranks whose context is a file by reference (or in band).
class JobRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* address : {"a:1", "b:2", "c:3", "d:4"})
      ASSERT_TRUE(
          registry_.Register(address, "cpu", {{"preset:small", *PresetConfig("small")}}).ok());
  }

  AdmittedJob Job(bool by_reference = true) {
    AdmittedJob job;
    job.spec.set_model("preset:small");
    job.spec.set_context_tokens(64);
    job.spec.set_token_width(256);
    job.spec.set_dtype(v1::F32);
    job.spec.add_shard_tokens(32);
    job.spec.add_shard_tokens(32);
    if (by_reference) {
      job.spec.mutable_context_ref()->set_path("context.npy");
      job.spec.mutable_output_ref()->set_path("output.npy");
    }
    job.plan = *PlanJob(job.spec, registry_, {});
    job.id = *jobs_.Create(job.spec);
    return job;
  }

  // `record`, when given: the job is taken back from it (TakeBack).
  absl::Status Run(AdmittedJob job, FakeTransport* transport, FakeCall* call,
                   const JobRecord* record = nullptr) {
    CoordinatorContext c{.registry = &registry_,
                         .kv = &kv_,
                         .jobs = &jobs_,
                         .options = options_,
                         .tenants = nullptr,
                         .draining = nullptr,
                         .spool = &spool_,
                         .metrics = nullptr};
    auto machine = std::make_shared<JobMachine>(job.id);
    JobRun run(c, transport, call, std::move(job), std::move(machine));
    if (record != nullptr) run.TakeBack(*record);
    const absl::Status status = run.Run();
    stats_ = run.stats();
    return status;
  }

  WorkerRegistry registry_{std::chrono::hours(1)};
  KvStore kv_;
  JobStore jobs_;
  JobSpool spool_{"", 0};
  CoordinatorOptions options_;
  v1::JobStats stats_;
};

TEST_F(JobRunTest, AGoneWorkerIsBlamedOverThePeerThatSawItGoAndTheJobRunsAgainWithoutIt) {
  // Rank 0's worker reports its group broken at once; rank 1's stream
  // breaks a moment later: rank 1's worker is the one gone.
  FakeTransport transport(
      {{ReportsGroupBroken(), Gone(absl::Milliseconds(200))}, {Succeeds(), Succeeds()}});
  FakeCall call;
  const absl::Status status = Run(Job(), &transport, &call);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(stats_.reruns(), 1);
  ASSERT_EQ(transport.attempts.size(), 2u);
  const std::string gone = transport.attempts[0]->addresses()[1];
  EXPECT_THAT(transport.attempts[1]->addresses(), Not(Contains(gone)));
  EXPECT_THAT(transport.forgotten, Contains(transport.attempts[0]->addresses()[0]))
      << "the survivor forgets what it kept of the failed attempt";
  EXPECT_THAT(transport.attempts[1]->specs()[0].rendezvous_prefix(), HasSubstr("/1/"))
      << "the second attempt meets under its own prefix";
  EXPECT_EQ(transport.attempts[0]->specs()[0].ticket(), transport.attempts[0]->specs()[1].ticket());
  EXPECT_NE(transport.attempts[0]->specs()[0].ticket(), transport.attempts[1]->specs()[0].ticket());
  ASSERT_FALSE(call.written.empty());
  EXPECT_TRUE(call.written.back().has_done());
}

TEST_F(JobRunTest, APeerSilentWhileItsGroupTimesOutIsBlamedAsStalled) {
  FakeTransport transport({{ReportsGroupTimedOut(), Silent()}, {Succeeds(), Succeeds()}});
  FakeCall call;
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = Run(Job(), &transport, &call);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900))
      << "the silent peer is given its grace before it is blamed";
  EXPECT_EQ(stats_.reruns(), 1);
  ASSERT_EQ(transport.attempts.size(), 2u);
  EXPECT_THAT(transport.attempts[1]->addresses(),
              Not(Contains(transport.attempts[0]->addresses()[1])));
}

TEST_F(JobRunTest, AWorkerThatRefusesItsShardForItsOwnReasonIsNotRunAgain) {
  FakeTransport transport(
      {{{.end = {absl::InvalidArgumentError("token 3 is not finite"), true}}, Succeeds()}});
  FakeCall call;
  const absl::Status status = Run(Job(), &transport, &call);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("token 3 is not finite"));
  EXPECT_EQ(transport.attempts.size(), 1u);
  EXPECT_EQ(stats_.reruns(), 0);
}

TEST_F(JobRunTest, AnInBandContextWhoseClientLeftCannotRunAgain) {
  FakeCall call;
  ScriptedRank gone = Gone(absl::Milliseconds(50));
  gone.before_end = [&call] { call.End(); };  // the client went with it
  FakeTransport transport({{Succeeds(), gone}});
  const absl::Status status = Run(Job(/*by_reference=*/false), &transport, &call);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(transport.attempts[0]->addresses()[1]))
      << "the failure names the worker that is gone";
  EXPECT_EQ(transport.attempts.size(), 1u);
}

TEST_F(JobRunTest, ReRunsStopAtTheirLimitWithTheLastCause) {
  options_.max_reruns = 1;
  FakeTransport transport(
      {{Succeeds(), Gone(absl::Milliseconds(10))}, {Succeeds(), Gone(absl::Milliseconds(10))}});
  FakeCall call;
  const absl::Status status = Run(Job(), &transport, &call);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  ASSERT_EQ(transport.attempts.size(), 2u);
  EXPECT_THAT(std::string(status.message()), HasSubstr(transport.attempts[1]->addresses()[1]));
  EXPECT_EQ(stats_.reruns(), 1);
}

TEST_F(JobRunTest, StatisticsTakeTheSlowestRankAndSumTheAllReduce) {
  ScriptedRank a{.messages = {Done(4, 2, 0.5)}};
  ScriptedRank b{.messages = {Done(3, 2, 0.5)}};
  FakeTransport transport({{a, b}});
  FakeCall call;
  ASSERT_TRUE(Run(Job(), &transport, &call).ok());
  EXPECT_DOUBLE_EQ(stats_.compute_seconds(), 4);
  EXPECT_DOUBLE_EQ(stats_.allreduce_seconds(), 4);
  EXPECT_DOUBLE_EQ(stats_.allreduce_hidden_fraction(), 0.75);
  EXPECT_DOUBLE_EQ(stats_.upload_seconds(), 0.4);
  EXPECT_DOUBLE_EQ(stats_.upload_mb_per_second(), 2 / 0.4);
  EXPECT_EQ(stats_.worker_peak_rss_bytes_size(), 2);
  EXPECT_EQ(stats_.coordinator_payload_bytes(), 0);
  EXPECT_TRUE(stats_.results_delivered());
  EXPECT_EQ(stats_.layers(), PresetConfig("small")->n_layers);
}

// A job taken back after a restart: where its record says attempt 2 ran
// (on c:3 and d:4), it follows that attempt's shards there again, and runs
// no new attempt when they succeed.
TEST_F(JobRunTest, ATakenBackJobFollowsItsRecordedAttemptWhereItRuns) {
  FakeTransport transport({{Succeeds(), Succeeds()}});
  FakeCall call;
  JobRecord record;
  record.set_attempt(2);
  record.set_reruns(2);
  record.add_workers("c:3");
  record.add_workers("d:4");
  record.set_fetch_ticket("kept-fetch-ticket");
  const absl::Status status = Run(Job(), &transport, &call, &record);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(transport.followed, ::testing::ElementsAre(2));
  ASSERT_EQ(transport.attempts.size(), 1u);
  EXPECT_THAT(transport.attempts[0]->addresses(), ::testing::ElementsAre("c:3", "d:4"));
  EXPECT_EQ(stats_.reruns(), 2) << "no attempt was added";
}

// When the followed attempt cannot go on (a worker lost while the
// coordinator was away), the job runs again as a new attempt, numbered
// past every attempt before it, without the lost worker.
TEST_F(JobRunTest, ATakenBackJobWhoseWorkerWasLostRunsAgainUnderANewAttempt) {
  FakeTransport transport(
      {{ReportsGroupBroken(), Gone(absl::Milliseconds(100))}, {Succeeds(), Succeeds()}});
  FakeCall call;
  JobRecord record;
  record.set_attempt(1);
  record.set_reruns(1);
  record.add_workers("a:1");
  record.add_workers("b:2");
  const absl::Status status = Run(Job(), &transport, &call, &record);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(transport.followed, ::testing::ElementsAre(1));
  ASSERT_EQ(transport.attempts.size(), 2u);
  EXPECT_THAT(transport.attempts[1]->addresses(), Not(Contains("b:2")));
  ASSERT_EQ(transport.attempts[1]->specs().size(), 2u);
  EXPECT_EQ(transport.attempts[1]->specs()[0].attempt(), 2);
  EXPECT_THAT(transport.attempts[1]->specs()[0].rendezvous_prefix(), HasSubstr("/2/"));
  EXPECT_EQ(stats_.reruns(), 2);
}

}  // namespace
}  // namespace lact::server
