// Jobs outlive their coordinator: with --state-dir, a coordinator killed
// (SIGKILL) or rolled (SIGTERM) under running and queued jobs and started
// again takes them back; their shards ran on, held on their workers,
// and their clients rode the restart out (LactClient's Submit follows the
// job with WatchJob). Every job succeeds with the bytes of an undisturbed
// run; one whose worker was lost meanwhile runs again; one whose
// coordinator stayed away past the workers' grace ends FAILED, saying so.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "tests/metrics_scrape.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kModel[] = "preset:small:3";

// A folder of the test's own (the data root and the coordinator's state),
// removed with it.
class Folder {
 public:
  explicit Folder(const std::string& name)
      : path_(absl::StrCat(::testing::TempDir(), "/lact_", name, "_", getpid())) {
    fs::remove_all(path_);
    fs::create_directories(path_ + "/data");
    fs::create_directories(path_ + "/state");
  }
  ~Folder() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string data() const { return path_ + "/data"; }

 private:
  const std::string path_;
};

// Two workers, holding shards for `grace_seconds` when their coordinator
// is away; a coordinator on `folder`'s state, with time in line and for
// uploads long enough to span a restart.
std::unique_ptr<LocalCluster> StartKeptCluster(const Folder& folder, int grace_seconds = 60) {
  LocalClusterOptions o;
  o.workers = 2;
  o.data_root = folder.data();
  o.coordinator_args = {
      "--state-dir", folder.path() + "/state",   "--max-reruns", "10", "--acquire-timeout-ms",
      "120000",      "--upload-idle-timeout-ms", "30000"};
  o.worker_args = {"--coordinator-grace-seconds", absl::StrCat(grace_seconds)};
  return StartTestCluster(o);
}

SubmitOptions Options() {
  SubmitOptions o;
  o.model = kModel;
  o.workers = 2;
  o.timeout = std::chrono::seconds(180);
  return o;
}

// What one job gave its client, and whether the client saw its
// coordinator go away.
struct Followed {
  absl::StatusOr<JobResult> result = absl::UnknownError("not run");
  bool rode_out = false;
};

Followed SubmitFollowing(LactClient& client, const SubmitOptions& o, const ContextInput& context,
                         const std::vector<Tensor>& queries) {
  Followed run;
  run.result = client.Submit(o, context, queries, [&run](const v1::Progress& p) {
    if (p.stage() == v1::Progress::COORDINATOR_AWAY) run.rode_out = true;
  });
  return run;
}

void ExpectSame(const JobResult& got, const JobResult& want, const std::string& what) {
  EXPECT_TRUE(got.output.data == want.output.data) << what << ": outputs differ";
  ASSERT_EQ(got.queries.size(), want.queries.size()) << what;
  for (size_t k = 0; k < want.queries.size(); ++k)
    EXPECT_TRUE(got.queries[k].data == want.queries[k].data) << what << ": query set " << k;
  ASSERT_EQ(got.state.size(), want.state.size()) << what;
  for (const auto& [name, t] : want.state)
    EXPECT_TRUE(got.state.at(name).data == t.data) << what << ": state " << name;
}

// The jobs of one run: A in band (context, a query set, the state) or by
// reference (context and output files), B in band, queued behind A.
struct Jobs {
  Tensor context = RandomTokens(2048, 256, 91);
  Tensor small = RandomTokens(512, 256, 92);
  std::vector<Tensor> queries = {RandomTokens(48, 256, 93)};
  JobResult in_band, by_reference, queued;  // undisturbed
};

// What a `lact submit` command that exited `rc` wrote to `out`: its output.
absl::StatusOr<JobResult> CommandResult(int rc, const std::string& out) {
  if (rc != 0) {
    std::ifstream log(out + ".log");
    std::stringstream text;
    text << log.rdbuf();
    return absl::InternalError(absl::StrCat("lact submit exited ", rc, ": ", text.str()));
  }
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out);
  if (!file.ok()) return file.status();
  JobResult result;
  absl::StatusOr<Tensor> output = file->ReadFloat("output");
  if (!output.ok()) return output.status();
  result.output = *std::move(output);
  return result;
}

// Where in job A's life a run kills the coordinator.
enum class Moment { kUpload, kCompute, kOutput, kRerunRendezvous, kAnywhere };

const char* MomentName(Moment m) {
  switch (m) {
    case Moment::kUpload:
      return "upload";
    case Moment::kCompute:
      return "compute";
    case Moment::kOutput:
      return "output";
    case Moment::kRerunRendezvous:
      return "a re-run's rendezvous";
    case Moment::kAnywhere:
      return "anywhere";
  }
  return "?";
}

// Job A's progress, as its client hears it.
struct Watched {
  std::atomic<bool> admitted{false};
  std::atomic<int> layers{0};
};

// kill -9 of the coordinator in 20 runs, each of a job A with a job B
// queued behind it, at a random moment of A's (its upload, its compute,
// its last layer while its outputs stream, a re-run's rendezvous after
// one of its workers was killed, or anywhere in it); the coordinator is
// started again within 3 s. Every job succeeds, equal to an undisturbed
// run bit for bit, and its client's Submit returns it.
TEST(CoordinatorRestarts, KillNineAtRandomMomentsLosesNoJob) {
  Folder folder("restarts");
  ASSERT_TRUE(WriteNpy(folder.data() + "/context.npy", RandomTokens(2048, 256, 94)).ok());
  std::unique_ptr<LocalCluster> cluster = StartKeptCluster(folder);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  Jobs jobs;
  SubmitOptions by_ref = Options();
  by_ref.return_state = false;
  by_ref.output = OutputTarget::File({"undisturbed.npy"});
  const ContextInput file = ContextInput::File({"context.npy"});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobResult> a = client.Submit(Options(), jobs.context, jobs.queries);
  ASSERT_TRUE(a.ok()) << a.status();
  const double job_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  jobs.in_band = *a;
  ASSERT_TRUE(client.Submit(by_ref, file, {}).ok());
  absl::StatusOr<Tensor> by_ref_want = ReadNpy(folder.data() + "/undisturbed.npy");
  ASSERT_TRUE(by_ref_want.ok());
  ASSERT_TRUE(WriteNpy(folder.path() + "/small.npy", jobs.small).ok());
  absl::StatusOr<JobResult> b = client.Submit(Options(), jobs.small, {});
  ASSERT_TRUE(b.ok()) << b.status();
  jobs.queued = *b;

  std::mt19937 rng(20261206);
  int succeeded = 0, rode_out = 0, continued = 0, reran = 0;
  for (int run = 0; run < 20; ++run) {
    const bool in_band = run % 2 == 0;
    const Moment moment = static_cast<Moment>(run % 5);
    SubmitOptions o = in_band ? Options() : by_ref;
    if (!in_band) o.output = OutputTarget::File({absl::StrCat("run", run, ".npy")});
    Followed first, second;
    Watched watched;
    std::thread job_a([&] {
      first.result = client.Submit(
          o, in_band ? ContextInput(jobs.context) : file,
          in_band ? jobs.queries : std::vector<Tensor>{},
          [&](const v1::Progress& p) {
            if (p.stage() == v1::Progress::LAYERS) watched.layers = p.layers_done();
            if (p.stage() == v1::Progress::COORDINATOR_AWAY) first.rode_out = true;
          },
          [&](const std::string&) { watched.admitted = true; });
    });
    EXPECT_TRUE(WaitFor([&] { return watched.admitted.load(); }));
    // Every other B is `lact submit`, which must exit 0 with its --out written.
    const bool command = run % 2 == 1;
    const std::string out = absl::StrCat(folder.path(), "/b", run, ".safetensors");
    int command_rc = -1;
    std::thread job_b([&] {
      if (command) {
        command_rc = std::system(
            absl::StrCat(LACT_CLI_PATH, " submit --server ", cluster->address(), " --model ",
                         kModel, " --workers 2 --timeout 180 --context ", folder.path(),
                         "/small.npy --out ", out, " > ", out, ".log 2>&1")
                .c_str());
      } else {
        second = SubmitFollowing(client, Options(), jobs.small, {});
      }
    });
    const auto uniform = [&](double from, double to) {
      return std::chrono::duration<double>(std::uniform_real_distribution<double>(from, to)(rng));
    };
    if (moment == Moment::kUpload) {
      std::this_thread::sleep_for(uniform(0, 0.03));
    } else if (moment == Moment::kAnywhere) {
      std::this_thread::sleep_for(uniform(0, 1.1 * job_seconds));
    } else {
      const int layers = moment == Moment::kOutput ? 2 : 1;
      WaitFor([&] { return watched.layers >= layers; }, std::chrono::seconds(30));
    }
    if (moment == Moment::kCompute) std::this_thread::sleep_for(uniform(0, 0.05));
    if (moment == Moment::kRerunRendezvous) {
      EXPECT_TRUE(cluster->RestartWorker(run % 2).ok());
      std::this_thread::sleep_for(uniform(0, 0.3));
    }
    cluster->KillCoordinator();
    std::this_thread::sleep_for(uniform(0, 3));
    const absl::Status back = cluster->StartCoordinatorAgain();
    job_a.join();
    job_b.join();
    const std::string what = absl::StrCat("run ", run, " (", MomentName(moment), ")");
    ASSERT_TRUE(back.ok()) << what << ": " << back;
    ASSERT_TRUE(first.result.ok()) << what << " A: " << first.result.status();
    if (command) second.result = CommandResult(command_rc, out);
    ASSERT_TRUE(second.result.ok()) << what << " B: " << second.result.status();
    if (in_band) {
      ExpectSame(*first.result, jobs.in_band, what + " A");
    } else {
      absl::StatusOr<Tensor> got = ReadNpy(absl::StrCat(folder.data(), "/run", run, ".npy"));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(got->data == by_ref_want->data) << what << " A: output file differs";
    }
    if (command) {
      EXPECT_TRUE(second.result->output.data == jobs.queued.output.data) << what << " B (lact)";
    } else {
      ExpectSame(*second.result, jobs.queued, what + " B");
    }
    succeeded += 2;
    rode_out += first.rode_out + second.rode_out;
    if (first.rode_out) (first.result->stats.reruns() == 0 ? continued : reran) += 1;
  }
  std::printf(
      "coordinator kill -9: %d/40 jobs succeeded, %d of their clients rode a restart out; of the "
      "20 jobs the kill came under, %d continued without recomputing, %d ran again\n",
      succeeded, rode_out, continued, reran);
  EXPECT_GT(continued, 0) << "no job continued through a restart: the test proved nothing";
}

// A kept cluster, its client, and the undisturbed run of an in-band job
// (context, a query set, the state).
class KeptCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster = StartKeptCluster(folder_);
    ASSERT_NE(cluster, nullptr);
    client = std::make_unique<LactClient>(cluster->address());
    absl::StatusOr<JobResult> want = client->Submit(Options(), jobs.context, jobs.queries);
    ASSERT_TRUE(want.ok()) << want.status();
    want_ = *std::move(want);
  }

  Folder folder_{"kept"};
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<LactClient> client;
  Jobs jobs;
  JobResult want_;
};

// A rollout: SIGTERM hands the running and queued jobs over, the next
// coordinator takes them back; none fails.
TEST_F(KeptCluster, RolloutHandsJobsOver) {
  for (int run = 0; run < 4; ++run) {
    Followed first, second;
    std::thread job_a(
        [&] { first = SubmitFollowing(*client, Options(), jobs.context, jobs.queries); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::thread job_b([&] { second = SubmitFollowing(*client, Options(), jobs.context, {}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + 300 * run));
    cluster->SignalCoordinator(SIGTERM);
    EXPECT_TRUE(cluster->CoordinatorExits(std::chrono::seconds(10)))
        << "a coordinator with --state-dir stops at once on SIGTERM";
    const absl::Status back = cluster->StartCoordinatorAgain();
    job_a.join();
    job_b.join();
    ASSERT_TRUE(back.ok()) << back;
    ASSERT_TRUE(first.result.ok()) << "run " << run << ": " << first.result.status();
    ASSERT_TRUE(second.result.ok()) << "run " << run << ": " << second.result.status();
    ExpectSame(*first.result, want_, absl::StrCat("run ", run));
    EXPECT_TRUE(second.result->output.data == want_.output.data) << "run " << run;
  }
}

// A worker lost (killed, and started again empty) while the coordinator
// is down: the job taken back finds its shard gone there and runs again.
TEST_F(KeptCluster, WorkerLostMeanwhileRunsAgain) {
  Followed run;
  std::atomic<bool> computing{false};
  std::thread job([&] {
    run.result = client->Submit(Options(), jobs.context, jobs.queries, [&](const v1::Progress& p) {
      if (p.stage() == v1::Progress::LAYERS) computing = true;
      if (p.stage() == v1::Progress::COORDINATOR_AWAY) run.rode_out = true;
    });
  });
  EXPECT_TRUE(WaitFor([&] { return computing.load(); }, std::chrono::seconds(60)));
  cluster->KillCoordinator();
  // Started again as a supervisor would, it waits for a coordinator to
  // register with.
  const absl::Status worker_back = cluster->RestartWorker(1, /*await_registration=*/false);
  const absl::Status coordinator_back = cluster->StartCoordinatorAgain();
  job.join();
  ASSERT_TRUE(worker_back.ok()) << worker_back;
  ASSERT_TRUE(coordinator_back.ok()) << coordinator_back;
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_TRUE(run.rode_out);
  EXPECT_GE(run.result->stats.reruns(), 1) << "the lost worker's shard cannot have continued";
  ExpectSame(*run.result, want_, "the job run again");
}

// `call` made by a client that has heard nothing from `cluster`'s
// coordinator yet, as that coordinator goes away before answering
// (stopped, the call sent, then killed), and the coordinator started
// again; `call` has returned. The restart's status.
absl::Status CallAsTheCoordinatorGoes(LocalCluster& cluster,
                                      const std::function<void(LactClient&)>& call) {
  LactClient fresh(cluster.address());
  EXPECT_TRUE(fresh.WaitUntilReachable(std::chrono::seconds(5)).ok());
  cluster.SignalCoordinator(SIGSTOP);
  std::thread caller([&] { call(fresh); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the call is sent
  cluster.KillCoordinator();
  const absl::Status back = cluster.StartCoordinatorAgain();
  caller.join();
  return back;
}

// What a Submit made as CallAsTheCoordinatorGoes makes its call returned.
Followed SubmitAsTheCoordinatorGoes(LocalCluster& cluster, const Tensor& context,
                                    const std::vector<Tensor>& queries) {
  Followed run;
  const absl::Status back = CallAsTheCoordinatorGoes(cluster, [&](LactClient& client) {
    run = SubmitFollowing(client, Options(), context, queries);
  });
  EXPECT_TRUE(back.ok()) << back;
  return run;
}

// The calls that only read (the first `lact submit` makes is ListModels),
// sent as the coordinator went away before answering (stopped, then
// killed): made again by gRPC's retries, they ride the restart out.
TEST_F(KeptCluster, AReadCutBeforeItsAnswerIsMadeAgain) {
  absl::StatusOr<std::vector<v1::ModelInfo>> models = absl::UnknownError("not run");
  absl::StatusOr<v1::JobInfo> job = absl::UnknownError("not run");
  const absl::Status back = CallAsTheCoordinatorGoes(*cluster, [&](LactClient& client) {
    models = client.ListModels();
    job = client.GetJob(want_.job_id);
  });
  ASSERT_TRUE(back.ok()) << back;
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->status(), v1::JobInfo::SUCCEEDED);
}

// A coordinator that keeps its jobs, gone before answering a Submit call:
// the call is made again once it is back, and follows the job if the
// first call admitted it, or admits it; the job equals an undisturbed run.
TEST_F(KeptCluster, ASubmitCutBeforeAnyAnswerIsMadeAgain) {
  const Followed run = SubmitAsTheCoordinatorGoes(*cluster, jobs.context, jobs.queries);
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_TRUE(run.rode_out) << "no COORDINATOR_AWAY while the call waited";
  ExpectSame(*run.result, want_, "the job sent again");
}

// The coordinator away longer than the workers' grace: they drop the held
// shards (the shard stops, its kept results go), and the job taken back
// ends FAILED, saying why.
TEST(CoordinatorRestarts, AwayPastTheGraceFailsTheJobSayingWhy) {
  Folder folder("grace");
  std::unique_ptr<LocalCluster> cluster = StartKeptCluster(folder, /*grace_seconds=*/1);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  Jobs jobs;
  absl::StatusOr<JobResult> job = absl::UnknownError("not run");
  std::atomic<bool> computing{false};
  std::string job_id;
  std::thread submit([&] {
    job = client.Submit(Options(), RandomTokens(8192, 256, 95), {}, [&](const v1::Progress& p) {
      if (p.stage() == v1::Progress::LAYERS) computing = true;
    });
  });
  EXPECT_TRUE(WaitFor([&] { return computing.load(); }, std::chrono::seconds(60)));
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
  cluster->KillCoordinator();
  std::this_thread::sleep_for(std::chrono::seconds(4));  // past the grace and a heartbeat
  // The workers dropped the shards: none runs, nothing of the job is kept.
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const v1::WorkerInfo& w : *workers) {
    const std::string scrape = Scrape(w.metrics_address());
    EXPECT_EQ(Sample(scrape, "lact_worker_shards_running"), 0) << w.address();
    EXPECT_EQ(Sample(scrape, "lact_worker_retained_bytes"), 0) << w.address();
  }
  const absl::Status back = cluster->StartCoordinatorAgain();
  submit.join();
  ASSERT_TRUE(back.ok()) << back;
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kAborted) << job.status();
  EXPECT_NE(job.status().message().find("--coordinator-grace-seconds"), std::string::npos)
      << job.status();
  // Nothing of it is held any more: a new job runs on both workers.
  absl::StatusOr<JobResult> next = client.Submit(Options(), jobs.small, {});
  EXPECT_TRUE(next.ok()) << next.status();
}

// Without --state-dir nothing outlives the coordinator, as the start-up
// log says: a client whose coordinator is killed mid-job is told so at
// once, and does not wait for a coordinator that would not know its job.
TEST(CoordinatorRestarts, WithoutAStateDirTheClientIsToldAtOnce) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  Jobs jobs;
  absl::StatusOr<JobResult> job = absl::UnknownError("not run");
  std::atomic<bool> computing{false};
  std::atomic<bool> away{false};
  std::thread submit([&] {
    job = client.Submit(Options(), RandomTokens(8192, 256, 96), {}, [&](const v1::Progress& p) {
      if (p.stage() == v1::Progress::LAYERS) computing = true;
      if (p.stage() == v1::Progress::COORDINATOR_AWAY) away = true;
    });
  });
  EXPECT_TRUE(WaitFor([&] { return computing.load(); }, std::chrono::seconds(60)));
  const auto killed = std::chrono::steady_clock::now();
  cluster->KillCoordinator();
  submit.join();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(10));
  EXPECT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable) << job.status();
  EXPECT_FALSE(away.load()) << "it waited for a coordinator that keeps no jobs";
}

// Without --state-dir too, a Submit call its coordinator never answered
// is made again once a coordinator listens: the call admitted nothing the
// client heard of, so the coordinator started again admits it.
TEST(CoordinatorRestarts, WithoutAStateDirACallNeverAnsweredIsMadeAgain) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  Jobs jobs;
  LactClient client(cluster->address());
  const absl::StatusOr<JobResult> want = client.Submit(Options(), jobs.small, {});
  ASSERT_TRUE(want.ok()) << want.status();
  const Followed run = SubmitAsTheCoordinatorGoes(*cluster, jobs.small, {});
  ASSERT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_TRUE(run.rode_out) << "no COORDINATOR_AWAY while the call waited";
  ExpectSame(*run.result, *want, "the job sent again");
}

}  // namespace
}  // namespace lact::testing
