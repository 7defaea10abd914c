// Jobs outlive their clients, end to end through real processes and real
// gRPC on 127.0.0.1: a client that vanishes mid-compute or mid-download
// (a raw client cutting its calls, and a `lact submit` process killed with
// SIGKILL) loses nothing: the job completes and FetchResult (`lact fetch`)
// returns outputs, query outputs and state equal bit for bit to an
// uninterrupted run. A client that vanishes mid-upload with
// cancel_on_disconnect cancels its job. Twenty detached jobs submitted to two workers run in order,
// each equal to its run alone.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "lact/v1/data.grpc.pb.h"
#include "tests/random_model.h"
#include "tests/raw_job.h"
#include "tests/service_support.h"

extern char** environ;

namespace lact::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string DataRootDir() {
  static const std::string dir = [] {
    const std::string base = absl::StrCat(::testing::TempDir(), "/lact_job_lifetime_", getpid());
    fs::remove_all(base);
    fs::create_directories(base + "/jobs");
    return base;
  }();
  return dir;
}

class JobLifetimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = StartTestCluster(2, {}, DataRootDir()).release(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    fs::remove_all(DataRootDir());
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  static LactClient Client() { return LactClient(cluster_->address()); }

  // A job of a few seconds on two one-thread workers, with a query set
  // and its state: what an uninterrupted client gets.
  static v1::JobSpec Spec(const Tensor& context, const std::vector<Tensor>& queries) {
    v1::JobSpec spec = MakeJobSpec(Options(), context, queries);
    return spec;
  }
  static SubmitOptions Options() {
    SubmitOptions o = LongJobOptions(2);
    o.return_state = true;
    return o;
  }

  static LocalCluster* cluster_;
};

LocalCluster* JobLifetimeTest::cluster_ = nullptr;

enum class CutAt { kCompute, kDownload };

class ClientVanishesTest : public JobLifetimeTest, public ::testing::WithParamInterface<CutAt> {};

TEST_P(ClientVanishesTest, JobCompletesAndFetchReturnsWhatTheClientMissed) {
  const Tensor context = RandomTokens(8192, 256, 31);
  const std::vector<Tensor> queries = {RandomTokens(40, 256, 32)};
  absl::StatusOr<JobResult> uninterrupted = Client().Submit(Options(), context, queries);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();

  std::string job_id;
  {
    RawJob job(cluster_->address(), Spec(context, queries));
    ASSERT_EQ(job.accepted().shards_size(), 2);
    job_id = job.accepted().job_id();
    std::vector<RawJob::Transfer> transfers;
    for (int rank = 0; rank < 2; ++rank) transfers.push_back(job.Upload(rank, context, queries));
    if (GetParam() == CutAt::kCompute) {
      ASSERT_TRUE(job.AwaitProgress(v1::Progress::LAYERS))
          << "the job ended before its first layer";
    } else {
      v1::TransferResponse first;
      ASSERT_TRUE(transfers[0].stream->Read(&first)) << "no output reached the client";
      ASSERT_TRUE(first.has_output());
    }
    job.Cut();
    for (RawJob::Transfer& t : transfers) t.Cut();
    for (RawJob::Transfer& t : transfers) t.stream->Finish().IgnoreError();
    job.Finish().IgnoreError();
  }
  absl::StatusOr<v1::JobInfo> end = Client().WatchJob(job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << end->error();
  EXPECT_TRUE(end->results_retained());
  if (GetParam() == CutAt::kCompute) {
    EXPECT_FALSE(end->stats().results_delivered()) << "the client was gone before any result";
  }
  absl::StatusOr<JobResult> fetched = Client().FetchResult(job_id);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ExpectSameResults(*fetched, *uninterrupted);
}

INSTANTIATE_TEST_SUITE_P(Stages, ClientVanishesTest,
                         ::testing::Values(CutAt::kCompute, CutAt::kDownload),
                         [](const auto& info) {
                           return info.param == CutAt::kCompute ? "MidCompute" : "MidDownload";
                         });

// A job whose client went away after its upload, and then one of whose
// workers died once the job showed its context spooled: its context is
// read back from the coordinator's spool, it runs again on the workers
// left, and FetchResult returns what an undisturbed run returns.
TEST_F(JobLifetimeTest, DetachedInBandJobWhoseWorkerDiesRunsAgainFromItsSpool) {
  // Long enough that the kill, at the first layer's end, comes well before
  // the job's end even on a loaded machine.
  const Tensor context = RandomTokens(32768, 256, 35);
  absl::StatusOr<JobResult> undisturbed = Client().Submit(Options(), context, {});
  ASSERT_TRUE(undisturbed.ok()) << undisturbed.status();
  EXPECT_TRUE(undisturbed->stats.spooled()) << "lact local spools in-band contexts";

  std::string job_id;
  {
    RawJob job(cluster_->address(), Spec(context, {}));
    ASSERT_EQ(job.accepted().shards_size(), 2);
    job_id = job.accepted().job_id();
    std::vector<RawJob::Transfer> transfers;
    for (int rank = 0; rank < 2; ++rank) transfers.push_back(job.Upload(rank, context, {}));
    ASSERT_TRUE(job.AwaitProgress(v1::Progress::LAYERS)) << "the job ended before its first layer";
    job.Cut();
    for (RawJob::Transfer& t : transfers) t.Cut();
    for (RawJob::Transfer& t : transfers) t.stream->Finish().IgnoreError();
    job.Finish().IgnoreError();
    // The workers report their spooled rows at a layer's end: the job can
    // run again from the moment its record says so.
    absl::StatusOr<v1::JobInfo> info = Client().GetJob(job_id);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (info.ok() && info->status() == v1::JobInfo::RUNNING && !info->stats().spooled() &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      info = Client().GetJob(job_id);
    }
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_EQ(info->status(), v1::JobInfo::RUNNING) << "the job ended before the kill";
    ASSERT_TRUE(info->stats().spooled()) << "the running job never showed its context spooled";
    ASSERT_TRUE(cluster_->RestartWorker(1).ok());
  }
  absl::StatusOr<v1::JobInfo> end = Client().WatchJob(job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << end->error();
  EXPECT_GE(end->stats().reruns(), 1) << "the kill came after the job had ended";
  absl::StatusOr<JobResult> fetched = Client().FetchResult(job_id);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ExpectSameResults(*fetched, *undisturbed);
}

TEST_F(JobLifetimeTest, KilledSubmitProcessLosesNothing) {
  const Tensor context = RandomTokens(8192, 256, 41);
  const std::string input = DataRootDir() + "/killed_context.npy";
  ASSERT_TRUE(WriteNpy(input, context).ok());
  SubmitOptions o = Options();
  o.return_state = false;
  absl::StatusOr<JobResult> uninterrupted = Client().Submit(o, context, {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();

  const std::string address = cluster_->address(), out = DataRootDir() + "/killed.safetensors";
  std::vector<std::string> args = {LACT_CLI_PATH, "submit", "--server",  address,
                                   "--model",     o.model,  "--workers", "2",
                                   "--context",   input,    "--out",     out};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  std::string job_id;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (job_id.empty() && std::chrono::steady_clock::now() < give_up) {
    absl::StatusOr<std::vector<v1::JobInfo>> jobs = Client().ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    for (const v1::JobInfo& j : *jobs) {
      if (j.status() == v1::JobInfo::RUNNING && j.progress().stage() == v1::Progress::LAYERS)
        job_id = j.job_id();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(job_id.empty()) << "the submitted job never reached its layers";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wait_status)) << "the client finished before it was killed";
  EXPECT_FALSE(fs::exists(out)) << "the killed client wrote nothing";

  absl::StatusOr<v1::JobInfo> end = Client().WatchJob(job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << end->error();
  const std::string fetched = DataRootDir() + "/fetched.safetensors";
  const std::string command = absl::StrCat(LACT_CLI_PATH, " fetch --server ", address, " --job ",
                                           job_id, " --out ", fetched, " 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(fetched);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> output = file->ReadFloat("output");
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->shape, uninterrupted->output.shape);
  EXPECT_TRUE(output->data == uninterrupted->output.data)
      << "lact fetch differs from the uninterrupted run";
}

TEST_F(JobLifetimeTest, ClientVanishingMidUploadWithCancelOnDisconnectCancelsTheJob) {
  const Tensor context = RandomTokens(8192, 256, 51);
  v1::JobSpec spec = Spec(context, {});
  spec.set_cancel_on_disconnect(true);
  std::string job_id;
  {
    RawJob job(cluster_->address(), spec);
    job_id = job.accepted().job_id();
    RawJob::Transfer half = job.Upload(0, context, {}, job.accepted().shards(0).tokens() / 2);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(200));  // its chunks are in; the idle limit is 1 s
    job.Cut();
    half.Cut();
    half.stream->Finish().IgnoreError();
    job.Finish().IgnoreError();
  }
  absl::StatusOr<v1::JobInfo> end = Client().WatchJob(job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->status(), v1::JobInfo::CANCELLED) << end->error();
  EXPECT_THAT(end->error(), HasSubstr("cancelled: the client went away"));
  EXPECT_FALSE(end->results_retained());
  EXPECT_EQ(Client().FetchResult(job_id).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<JobResult> next = Client().Submit(Options(), RandomTokens(64, 256, 52), {});
  ASSERT_TRUE(next.ok()) << "the workers were given back: " << next.status();
}

TEST_F(JobLifetimeTest, ClientThatNeverComesForResultsByReferenceLosesNothing) {
  // The context by reference, the outputs and state in band: the client
  // leaves once the job is accepted, before opening any Transfer stream.
  const Tensor context = RandomTokens(4096, 256, 71);
  const std::string input = DataRootDir() + "/never_came.npy";
  ASSERT_TRUE(WriteNpy(input, context).ok());
  SubmitOptions o = Options();
  absl::StatusOr<JobResult> uninterrupted = Client().Submit(o, context, {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  v1::JobSpec spec = MakeJobSpec(o, ContextInput::File({input}), {});
  std::string job_id;
  {
    RawJob job(cluster_->address(), spec);
    job_id = job.accepted().job_id();
    ASSERT_FALSE(job_id.empty());
    job.Cut();
    job.Finish().IgnoreError();
  }
  absl::StatusOr<v1::JobInfo> end = Client().WatchJob(job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << end->error();
  EXPECT_FALSE(end->stats().results_delivered());
  absl::StatusOr<JobResult> fetched = Client().FetchResult(job_id);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ExpectSameResults(*fetched, *uninterrupted);
}

TEST_F(JobLifetimeTest, TwentyDetachedJobsRunInOrderEachAsAlone) {
  constexpr int kJobs = 20;
  std::vector<Tensor> contexts;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    contexts.push_back(RandomTokens(64, 32, 100 + i));
    const std::string name = absl::StrCat(DataRootDir(), "/jobs/detached_", i);
    ASSERT_TRUE(WriteNpy(name + ".npy", contexts.back()).ok());
    SubmitOptions o;
    o.model = "tiny";
    o.return_state = false;
    o.output = OutputTarget::File({name + ".out.npy"});
    o.detach = true;
    absl::StatusOr<JobResult> admitted =
        Client().Submit(o, ContextInput::File({name + ".npy"}), {});
    ASSERT_TRUE(admitted.ok()) << i << ": " << admitted.status();
    ids.push_back(admitted->job_id);
  }
  std::vector<v1::JobInfo> ends;
  for (const std::string& id : ids) {
    absl::StatusOr<v1::JobInfo> end = Client().WatchJob(id);
    ASSERT_TRUE(end.ok()) << end.status();
    ASSERT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << id << ": " << end->error();
    EXPECT_EQ(end->workers(), 2);
    ends.push_back(*end);
  }
  // They start in the order they came. They may end out of it: a job
  // staged behind another computes as soon as that one's compute ends,
  // while that one still writes its outputs.
  for (int i = 1; i < kJobs; ++i) {
    EXPECT_LT(ends[i - 1].started_unix_seconds(), ends[i].started_unix_seconds())
        << "job " << i << " overtook";
  }
  for (int i = 0; i < kJobs; ++i) {
    SubmitOptions o;
    o.model = "tiny";
    o.return_state = false;
    absl::StatusOr<JobResult> alone = Client().Submit(o, contexts[i], {});
    ASSERT_TRUE(alone.ok()) << alone.status();
    absl::StatusOr<Tensor> written =
        ReadNpy(absl::StrCat(DataRootDir(), "/jobs/detached_", i, ".out.npy"));
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_TRUE(written->data == alone->output.data)
        << "job " << i << " differs from its run alone";
  }
}

// A coordinator with --state-dir killed (SIGKILL) and started again on
// its ports: the finished job's record and retained state are still
// there, Query returns the same bytes from the state its worker kept, and
// new jobs run.
TEST(CoordinatorRestart, RecordsAndRetainedStatesSurvive) {
  const std::string state_dir = absl::StrCat(::testing::TempDir(), "/lact_state_", getpid());
  fs::create_directories(state_dir);
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2, {}, "", {"--state-dir", state_dir});
  ASSERT_NE(cluster, nullptr);
  SubmitOptions o;
  o.model = "preset:small:2";
  o.workers = 2;
  o.tenant = "kept";
  o.timeout = std::chrono::seconds(120);
  const std::vector<Tensor> queries = {RandomTokens(24, 256, 62)};
  absl::StatusOr<JobResult> job =
      LactClient(cluster->address()).Submit(o, RandomTokens(512, 256, 61), queries);
  ASSERT_TRUE(job.ok()) << job.status();

  absl::Status restarted = cluster->RestartCoordinator();
  ASSERT_TRUE(restarted.ok()) << restarted;
  LactClient client(cluster->address());
  absl::StatusOr<v1::JobInfo> info = client.GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->status(), v1::JobInfo::SUCCEEDED);
  EXPECT_EQ(info->tenant(), "kept");
  EXPECT_TRUE(info->state_retained());
  absl::StatusOr<JobResult> again = client.Query(job->job_id, queries);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->queries[0].data, job->queries[0].data) << "the same bytes from the kept state";
  absl::StatusOr<JobResult> next = client.Submit(o, RandomTokens(64, 256, 63), {});
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->job_id, job->job_id);
  cluster.reset();
  fs::remove_all(state_dir);
}

// Waits (up to 60 s, a loaded machine's worker start-up included) until
// the coordinator counts exactly two healthy workers, each heartbeating:
// the next job neither finds one worker too few (a restarted worker not
// yet registered) nor starts on the killed one (one kill, one run).
void AwaitTwoLiveWorkers(LactClient& client) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
    int live = 0;
    bool stale = false;
    for (const v1::WorkerInfo& w : workers.ok() ? *workers : std::vector<v1::WorkerInfo>{}) {
      if (!w.healthy()) continue;
      ++live;
      stale |= w.seconds_since_heartbeat() > 0.6;
    }
    if (live == 2 && !stale) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "the cluster did not get back to two live workers";
}

// Kills one of the cluster's two workers at a random moment within
// `window_seconds` of now and starts it again at once, as a supervisor
// would; join the thread after the job.
std::thread KillAtRandom(LocalCluster& cluster, std::mt19937& rng, double window_seconds) {
  const int victim = static_cast<int>(rng() % 2);
  const auto delay = std::chrono::duration<double>(
      std::uniform_real_distribution<double>(0.0, window_seconds)(rng));
  return std::thread([&cluster, victim, delay] {
    std::this_thread::sleep_for(delay);
    EXPECT_TRUE(cluster.RestartWorker(victim).ok());
    // Past 3 heartbeats of the test cluster's 300 ms: the killed worker no
    // longer counts as healthy, whether or not a job found it gone.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  });
}

// kill -9 of one of a job's two workers at a random moment, 20 times
// (every fourth within the job's first 0.1 s, while its shards meet): a
// job by reference runs again on the workers left (the killed one is
// started again at once, as a supervisor would), once at most (a second
// attempt would mean the first one's shards collided with it), and every
// job's output file equals an undisturbed run's, bit for bit.
TEST(FaultRuns, KilledWorkersNeverLoseAByReferenceJob) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/lact_faults_", getpid());
  fs::create_directories(root);
  ASSERT_TRUE(WriteNpy(root + "/context.npy", RandomTokens(2048, 256, 81)).ok());
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2, {}, root, {"--max-reruns", "10"});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  SubmitOptions o;
  o.model = "preset:small:3";
  o.workers = 2;
  const ContextInput file = ContextInput::File({"context.npy"});
  o.return_state = false;
  o.timeout = std::chrono::seconds(120);
  o.output = OutputTarget::File({"undisturbed.npy"});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobResult> undisturbed = client.Submit(o, file, {});
  ASSERT_TRUE(undisturbed.ok()) << undisturbed.status();
  const double job_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::StatusOr<Tensor> expected = ReadNpy(root + "/undisturbed.npy");
  ASSERT_TRUE(expected.ok());

  std::mt19937 rng(20261201);
  int completed = 0, reran = 0, early = 0;
  for (int run = 0; run < 20; ++run) {
    std::thread killer = KillAtRandom(*cluster, rng, run % 4 == 0 ? 0.1 : 1.2 * job_seconds);
    early += run % 4 == 0;
    const std::string output = absl::StrCat("run", run, ".npy");
    o.output = OutputTarget::File({output});
    absl::StatusOr<JobResult> job = client.Submit(o, file, {});
    killer.join();
    AwaitTwoLiveWorkers(client);
    ASSERT_TRUE(job.ok()) << "run " << run << ": " << job.status();
    absl::StatusOr<Tensor> got = ReadNpy(root + "/" + output);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->data, expected->data) << "run " << run;
    EXPECT_LE(job->stats.reruns(), 1) << "run " << run << ": one kill, more than one re-run";
    ++completed;
    reran += job->stats.reruns() > 0;
  }
  std::printf(
      "fault runs: %d/20 jobs completed (%d killed within 0.1 s), %d of them run again after "
      "their worker died\n",
      completed, early, reran);
  EXPECT_GT(reran, 0) << "no kill hit a running job; the test proved nothing";
  cluster.reset();
  fs::remove_all(root);
}

// The same with the context, a query set and the fused state in band,
// through LactClient: a run whose worker dies reads its context from the
// coordinator's spool, the client sends its query set again and takes the
// results of the run that completed, equal to an undisturbed run's.
TEST(FaultRuns, KilledWorkersNeverLoseAnInBandJob) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2, {}, "", {"--max-reruns", "10"});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  SubmitOptions o;
  o.model = "preset:small:3";
  o.workers = 2;
  o.return_state = true;
  o.timeout = std::chrono::seconds(120);
  const Tensor context = RandomTokens(2048, 256, 83);
  const std::vector<Tensor> queries = {RandomTokens(64, 256, 84)};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobResult> undisturbed = client.Submit(o, context, queries);
  ASSERT_TRUE(undisturbed.ok()) << undisturbed.status();
  const double job_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::mt19937 rng(20261202);
  int completed = 0, reran = 0;
  constexpr int kRuns = 20;
  for (int run = 0; run < kRuns; ++run) {
    std::thread killer = KillAtRandom(*cluster, rng, 1.2 * job_seconds);
    absl::StatusOr<JobResult> job = client.Submit(o, context, queries);
    killer.join();
    AwaitTwoLiveWorkers(client);
    ASSERT_TRUE(job.ok()) << "run " << run << ": " << job.status();
    EXPECT_TRUE(job->output.data == undisturbed->output.data) << "run " << run;
    ASSERT_EQ(job->queries.size(), 1u);
    EXPECT_TRUE(job->queries[0].data == undisturbed->queries[0].data) << "run " << run;
    ASSERT_EQ(job->state.size(), undisturbed->state.size());
    for (const auto& [name, t] : undisturbed->state)
      EXPECT_TRUE(job->state.at(name).data == t.data) << "run " << run << " " << name;
    ++completed;
    reran += job->stats.reruns() > 0;
  }
  std::printf("in-band fault runs: %d/%d jobs completed, %d of them run again\n", completed, kRuns,
              reran);
  EXPECT_GT(reran, 0) << "no kill hit a running job; the test proved nothing";
}

// A job of a few seconds on two one-thread workers.
// SIGTERM to a worker mid-job: the job still succeeds (the worker drains:
// its shard finishes), the worker then exits, and it is leased no more.
TEST(Drain, AWorkerFinishesItsShardThenLeaves) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  SubmitOptions o = LongJobOptions(2);
  bool uncounted = false, exited = false;
  const ActedJob job = SubmitActingAtFirstLayer(client, o, RandomTokens(65536, 256, 91), [&] {
    cluster->SignalWorker(0, SIGTERM);
    // Deregistered at once, while it still runs its shard and heartbeats:
    // a worker that did not deregister stays counted until it exits. Each
    // count of 1 is checked against the worker still running after it.
    LactClient observer(cluster->address());
    WaitFor([&] {
      absl::StatusOr<std::vector<v1::ModelInfo>> models = observer.ListModels();
      uncounted = models.ok() && !models->empty() && models->front().workers() == 1;
      exited = cluster->WorkerExits(0, std::chrono::milliseconds(0));
      return uncounted || exited;
    });
  });
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  ASSERT_TRUE(job.result.ok()) << job.result.status();
  EXPECT_TRUE(uncounted && !exited)
      << "a draining worker is leased no more: uncounted " << uncounted << ", exited " << exited;
  EXPECT_TRUE(cluster->WorkerExits(0, std::chrono::seconds(20))) << "it drained and left";
  absl::StatusOr<std::vector<v1::ModelInfo>> models = client.ListModels();
  ASSERT_TRUE(models.ok());
  for (const v1::ModelInfo& m : *models) EXPECT_EQ(m.workers(), 1) << m.name();
  o.workers = 0;  // all that hold the model: the one left
  absl::StatusOr<JobResult> next = client.Submit(o, RandomTokens(64, 256, 92), {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->shards.size(), 1u);
}

// The code a Submit whose request_id is over the coordinator's limit ends
// with: refused before any planning, so at once.
grpc::StatusCode RefusalOfAnOverlongRequestId(const std::string& address) {
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::SubmitRequest request;
  *request.mutable_spec() = MakeJobSpec(LongJobOptions(2), RandomTokens(8, 256, 94), {});
  request.mutable_spec()->set_request_id(std::string(1000, 'r'));
  std::unique_ptr<grpc::ClientReader<v1::SubmitResponse>> reader = stub->Submit(&ctx, request);
  v1::SubmitResponse response;
  while (reader->Read(&response)) {
  }
  return reader->Finish().error_code();
}

// SIGTERM to the coordinator mid-job: the running job succeeds, a new
// Submit is refused with UNAVAILABLE saying why, and the coordinator then
// exits.
TEST(Drain, TheCoordinatorFinishesItsJobsAndTakesNoNewOnes) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  absl::Status refused;
  const ActedJob job =
      SubmitActingAtFirstLayer(client, LongJobOptions(2), RandomTokens(65536, 256, 93), [&] {
        cluster->SignalCoordinator(SIGTERM);
        // A Submit with an over-long request_id is refused INVALID_ARGUMENT
        // at once until the coordinator drains, then UNAVAILABLE (it checks
        // that first).
        WaitFor([&] {
          return RefusalOfAnOverlongRequestId(cluster->address()) == grpc::StatusCode::UNAVAILABLE;
        });
        LactClient probe(cluster->address());
        SubmitOptions small = LongJobOptions(2);
        small.workers = 1;
        refused = probe.Submit(small, RandomTokens(8, 256, 94), {}).status();
      });
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  ASSERT_TRUE(job.result.ok()) << job.result.status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("shutting down"));
  EXPECT_TRUE(cluster->CoordinatorExits(std::chrono::seconds(20)));
}

}  // namespace
}  // namespace lact::testing
