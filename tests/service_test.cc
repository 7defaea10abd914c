// End to end through real processes and real gRPC on 127.0.0.1: a
// coordinator and workers started as `lact local` starts them, the C++
// client, Gloo between the workers. Golden cases with 1, 2 and 3 workers and
// uneven shards, Query against a retained job, results independent of the
// worker count; every kind of bad JobSpec; cancel, deadline and a worker
// killed mid-job, each followed by a job that still succeeds (nothing hangs
// or stays leased). The data plane's own failures: data_plane_test.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.grpc.pb.h"
#include "proto/keepalive.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

using ::testing::HasSubstr;

class ServiceTest : public ClusterSuite<3> {};

TEST_F(ServiceTest, GoldenCasesOverOneTwoAndThreeWorkers) {
  for (const std::string& name : GoldenCaseNames()) {
    absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    const int64_t L = golden->context.dim(0);
    const std::vector<std::vector<int64_t>> splits = {{}, {1, L - 1}, {L - 3, 2, 1}, {}};
    for (size_t i = 0; i < splits.size(); ++i) {
      SubmitOptions o = GoldenOptions(*golden);
      o.workers = i == 0 ? 1 : i == 3 ? 2 : 0;
      o.shard_tokens = splits[i];
      SCOPED_TRACE(absl::StrCat(name, " split ", i));
      absl::StatusOr<JobResult> got = Client().Submit(o, golden->context, golden->queries);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->shards.size(), i == 0 ? 1u : i == 3 ? 2u : splits[i].size());
      ExpectGolden(*golden, *got);
    }
  }
}

TEST_F(ServiceTest, QueryAgainstRetainedJobEqualsQueriesSentWithIt) {
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<JobResult> job =
      Client().Submit(GoldenOptions(*golden), golden->context, golden->queries);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobResult> later = Client().Query(job->job_id, golden->queries);
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_EQ(later->queries.size(), golden->queries.size());
  for (size_t k = 0; k < later->queries.size(); ++k) {
    EXPECT_EQ(later->queries[k].data, job->queries[k].data) << "query set " << k;
    EXPECT_LE(RelativeError(later->queries[k], golden->expected.at(absl::StrCat("query_", k))),
              1e-4);
  }
  ASSERT_EQ(later->shards.size(), 1u);
  EXPECT_EQ(later->shards[0].worker(), job->shards[0].worker())
      << "the sets went to the worker keeping the state";
  EXPECT_EQ(later->stats.coordinator_payload_bytes(), 0);
  EXPECT_GT(later->stats.upload_mb_per_second(), 0) << "that worker received them itself";
  EXPECT_EQ(later->stats.worker_peak_rss_bytes_size(), 1);
  absl::StatusOr<v1::JobInfo> info = Client().GetJob(job->job_id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status(), v1::JobInfo::SUCCEEDED);
  EXPECT_TRUE(info->state_retained());
  ASSERT_TRUE(Client().DeleteJob(job->job_id).ok());
  EXPECT_EQ(Client().Query(job->job_id, golden->queries).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, RandomModelIndependentOfWorkerCount) {
  // preset:small (W = 4) with chunks spanning shards, shards of one token and
  // shorter than W - 1, and bf16 tokens on the wire.
  Tensor context = RandomTokens(40, 256, 3);
  std::vector<Tensor> queries = {RandomTokens(1, 256, 4), RandomTokens(6, 256, 5)};
  SubmitOptions base;
  base.model = "preset:small:5";
  base.options.chunk_tokens = 7;
  base.workers = 1;
  base.timeout = std::chrono::seconds(60);
  absl::StatusOr<JobResult> one = Client().Submit(base, context, queries);
  ASSERT_TRUE(one.ok()) << one.status();
  for (std::vector<int64_t> split :
       std::vector<std::vector<int64_t>>{{20, 20}, {1, 2, 37}, {18, 1, 21}, {38, 1, 1}}) {
    SubmitOptions o = base;
    o.workers = 0;
    o.shard_tokens = split;
    absl::StatusOr<JobResult> got = Client().Submit(o, context, queries);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->output.shape, one->output.shape);
    for (size_t i = 0; i < one->output.data.size(); ++i) {
      ASSERT_NEAR(got->output.data[i], one->output.data[i], 1e-4 * 4) << i;
    }
    for (const auto& [name, t] : one->state) {
      const Tensor& g = got->state.at(name);
      double diff = 0, mag = 0;
      for (size_t i = 0; i < t.data.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::abs(g.data[i] - t.data[i])));
        mag = std::max(mag, static_cast<double>(std::abs(t.data[i])));
      }
      EXPECT_LE(diff, 1e-4 * std::max(mag, 1e-30)) << name;
    }
  }
}

// A raw stub, to send what the C++ client never would.
class RawSubmit {
 public:
  explicit RawSubmit(const std::string& address)
      : stub_(v1::CoordinatorService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
  // Starts the call with `r`.
  void Send(const v1::SubmitRequest& r) { stream_ = stub_->Submit(&ctx_, r); }
  grpc::Status Close() {
    v1::SubmitResponse response;
    while (stream_->Read(&response)) {
      if (response.has_accepted()) job_id_ = response.accepted().job_id();
    }
    return stream_->Finish();
  }
  void Cancel() { ctx_.TryCancel(); }
  bool ReadAccepted() {
    v1::SubmitResponse response;
    while (stream_->Read(&response)) {
      if (response.has_accepted()) {
        job_id_ = response.accepted().job_id();
        return true;
      }
    }
    return false;
  }
  // The job's id, from its first Progress in line ("" if none came).
  std::string ReadQueuedJobId() {
    v1::SubmitResponse response;
    while (stream_->Read(&response)) {
      if (response.has_progress() && response.progress().stage() == v1::Progress::QUEUED)
        return response.progress().job_id();
    }
    return "";
  }
  const std::string& job_id() const { return job_id_; }

 private:
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubmitResponse>> stream_;
  std::string job_id_;
};

v1::SubmitRequest Spec(const std::string& model, int64_t tokens, int32_t width) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_model(model);
  r.mutable_spec()->set_context_tokens(tokens);
  r.mutable_spec()->set_token_width(width);
  r.mutable_spec()->set_dtype(v1::F32);
  return r;
}

TEST_F(ServiceTest, BadJobSpecsAreRejectedWithAMessage) {
  struct Case {
    std::function<void(v1::SubmitRequest&)> edit;
    std::string message;
  } cases[] = {
      {[](auto& r) { r.mutable_spec()->set_model("nope"); }, "unknown model 'nope' (available: "},
      {[](auto& r) { r.mutable_spec()->set_model(""); }, "JobSpec.model is empty"},
      {[](auto& r) { r.mutable_spec()->set_token_width(31); },
       "token_width 31 does not match model 'tiny', which takes 32 features per token"},
      {[](auto& r) { r.mutable_spec()->set_context_tokens(0); },
       "context_tokens 0 is out of range (allowed: 1.."},
      {[](auto& r) { r.mutable_spec()->set_dtype(v1::DTYPE_UNSPECIFIED); },
       "dtype must be F32, BF16 or F16"},
      {[](auto& r) { r.mutable_spec()->set_workers(9); },
       "asks for 9 workers but 3 healthy workers hold model 'tiny'"},
      {[](auto& r) {
         r.mutable_spec()->set_context_tokens(2);
         r.mutable_spec()->set_workers(3);
       },
       "cannot shard 2 context tokens over 3 workers"},
      {[](auto& r) { r.mutable_spec()->mutable_options()->set_muon_steps(-1); },
       "muon_steps -1 is out of range"},
      {[](auto& r) { r.mutable_spec()->add_query_tokens(0); },
       "query set 0 has 0 tokens; need >= 1"},
      {[](auto& r) {
         r.mutable_spec()->add_shard_tokens(3);
         r.mutable_spec()->add_shard_tokens(3);
       },
       "shard_tokens add up to 6, not context_tokens 8"},
      {[](auto& r) { r.mutable_spec()->set_tenant("team a/../b"); },
       "JobSpec.tenant 'team a/../b' must be at most 64 letters, digits, '-', '_' or '.'"},
      {[](auto& r) { r.mutable_spec()->set_tenant(std::string(65, 't')); },
       "must be at most 64 letters"},
      {[](auto& r) { r.mutable_spec()->set_retain_seconds(int64_t{1} << 62); },
       "retain_seconds 4611686018427387904 is out of range (allowed: 0..2592000"},
  };
  for (const Case& c : cases) {
    v1::SubmitRequest spec = Spec("tiny", 8, 32);
    c.edit(spec);
    RawSubmit raw(cluster_->address());
    raw.Send(spec);
    grpc::Status s = raw.Close();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.message << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
  }
  RawSubmit no_spec(cluster_->address());
  no_spec.Send(v1::SubmitRequest());
  EXPECT_THAT(no_spec.Close().error_message(), HasSubstr("SubmitRequest.spec is missing"));
  RawSubmit by_ref(cluster_->address());
  v1::SubmitRequest ref = Spec("tiny", 8, 32);
  ref.mutable_spec()->mutable_context_ref()->set_path("/tmp/x.npy");
  by_ref.Send(ref);
  grpc::Status no_root = by_ref.Close();
  EXPECT_EQ(no_root.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << no_root.error_message();
  EXPECT_THAT(no_root.error_message(), HasSubstr("this cluster has no data root"));
}

TEST_F(ServiceTest, JobsBeyondTheFreeWorkersQueueAndAllComplete) {
  // Six jobs at once, each for all three workers: five wait in line (their
  // Progress says where) and every one completes, equal to its run alone.
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok());
  SubmitOptions o = GoldenOptions(*golden);
  o.workers = 3;
  absl::StatusOr<JobResult> alone = Client().Submit(o, golden->context, golden->queries);
  ASSERT_TRUE(alone.ok()) << alone.status();
  std::vector<absl::StatusOr<JobResult>> got(6, absl::UnknownError("not run"));
  std::atomic<int> queued{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&, i] {
      got[i] = Client().Submit(o, golden->context, golden->queries, [&](const v1::Progress& p) {
        if (p.stage() == v1::Progress::QUEUED && p.queue_position() >= 1) ++queued;
      });
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    EXPECT_TRUE(got[i]->output.data == alone->output.data) << i;
  }
  EXPECT_GT(queued.load(), 0) << "no job reported waiting in line";
}

// A job long enough to be interrupted (a few seconds on two cores).
void ExpectClusterStillWorks(LactClient&& client, int workers) {
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok());
  SubmitOptions o = GoldenOptions(*golden);
  o.workers = workers;
  absl::StatusOr<JobResult> got = client.Submit(o, golden->context, golden->queries);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectGolden(*golden, *got);
}

TEST_F(ServiceTest, CoordinatorNeverHoldsTheContext) {
  // 128 MiB of context in and 128 MiB of output back (the small golden
  // model keeps the compute short) move between the client and the
  // workers: none of it passes through the coordinator, whose peak RSS
  // grows by no more than a fraction of that over a tiny job's.
  SubmitOptions o;
  o.model = "tiny";
  o.return_state = false;
  o.timeout = std::chrono::seconds(120);
  absl::StatusOr<JobResult> small = Client().Submit(o, RandomTokens(8, 32, 20), {});
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<JobResult> got = Client().Submit(o, RandomTokens(1 << 20, 32, 21), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->stats.coordinator_payload_bytes(), 0);
  EXPECT_GT(got->stats.coordinator_peak_rss_bytes(), 0);
  EXPECT_LT(got->stats.coordinator_peak_rss_bytes() - small->stats.coordinator_peak_rss_bytes(),
            int64_t{32} << 20)
      << "the coordinator's peak RSS grew with the context";
  EXPECT_GT(got->stats.upload_mb_per_second(), 0.0);
  // The outputs stream while the last layer runs: their rate is over that
  // window, which ends with the tail after the compute.
  EXPECT_GT(got->stats.output_seconds(), 0.0);
  EXPECT_GE(got->stats.output_seconds(), got->stats.download_seconds());
  const double output_mb = (1 << 20) * 32 * 4 / 1e6;
  EXPECT_NEAR(got->stats.download_mb_per_second() * got->stats.output_seconds(), output_mb,
              output_mb * 1e-6);
  EXPECT_EQ(got->stats.worker_peak_rss_bytes_size(), 3);
}

// CancelJob as soon as the job is accepted (during the upload) and after
// its first layer (during compute).
class CancelTest : public ServiceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CancelTest, CancelJobMidRun) {
  const bool during_compute = GetParam();
  Tensor context = RandomTokens(during_compute ? 32768 : 16384, 256, 9);
  std::string job_id;
  std::atomic<bool> trigger{false}, done{false};
  std::thread canceller([&] {
    while (!trigger && !done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (done) return;
    absl::StatusOr<v1::JobInfo> cancelled = Client().CancelJob(job_id);
    EXPECT_TRUE(cancelled.ok()) << cancelled.status();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobResult> got = Client().Submit(
      LongJobOptions(3, "preset:small"), context, {},
      [&](const v1::Progress& p) {
        if (p.stage() == (during_compute ? v1::Progress::LAYERS : v1::Progress::UPLOAD))
          trigger = true;
      },
      [&](const std::string& id) { job_id = id; });
  done = true;
  canceller.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  absl::StatusOr<v1::JobInfo> info = Client().GetJob(job_id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status(), v1::JobInfo::CANCELLED);
  ExpectClusterStillWorks(Client(), 3);
}

TEST_F(ServiceTest, CancelJobReachesAJobWaitingInLine) {
  // A job whose client never uploads holds all three workers for the upload
  // idle timeout (1 s here), and a second one, staged behind it on them,
  // for as long again once its turn comes; B waits in line behind both, C
  // behind B. B is cancelled in line: it leaves at once and C moves up,
  // long before the workers come free (the queue has no timer; a cancel
  // wakes it).
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok());
  v1::SubmitRequest spec = Spec("tiny", 8, 32);
  spec.mutable_spec()->set_workers(3);
  RawSubmit holder(cluster_->address()), staged(cluster_->address()), b(cluster_->address());
  holder.Send(spec);
  ASSERT_TRUE(holder.ReadAccepted());
  staged.Send(spec);
  ASSERT_TRUE(staged.ReadAccepted());
  b.Send(spec);
  const std::string b_id = b.ReadQueuedJobId();
  ASSERT_FALSE(b_id.empty());
  SubmitOptions o = GoldenOptions(*golden);
  o.workers = 3;
  std::atomic<bool> second{false};
  std::atomic<int64_t> first_at_ns{0};
  std::thread c([&] {
    absl::StatusOr<JobResult> got =
        Client().Submit(o, golden->context, golden->queries, [&](const v1::Progress& p) {
          if (p.stage() != v1::Progress::QUEUED) return;
          if (p.queue_position() == 2) second = true;
          if (p.queue_position() == 1 && second && first_at_ns == 0) {
            first_at_ns = std::chrono::steady_clock::now().time_since_epoch().count();
          }
        });
    EXPECT_TRUE(got.ok()) << got.status();
  });
  while (!second) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // C's flow is asleep in line
  const auto cancelled_at = std::chrono::steady_clock::now();
  absl::StatusOr<v1::JobInfo> info = Client().CancelJob(b_id);
  EXPECT_TRUE(info.ok()) << info.status();
  c.join();
  ASSERT_GT(first_at_ns.load(), 0) << "C never moved up to first in line";
  const std::chrono::nanoseconds moved_up(first_at_ns - cancelled_at.time_since_epoch().count());
  EXPECT_LT(moved_up, std::chrono::milliseconds(500))
      << "C moved up only when the workers came free: B stayed in line after its cancel";
  EXPECT_EQ(b.Close().error_code(), grpc::StatusCode::CANCELLED);
  holder.Cancel();
  staged.Cancel();
  ExpectClusterStillWorks(Client(), 3);
}

INSTANTIATE_TEST_SUITE_P(Phases, CancelTest, ::testing::Values(false, true), [](const auto& info) {
  return info.param ? "DuringCompute" : "DuringUpload";
});

TEST_F(ServiceTest, DeadlineThatExpires) {
  SubmitOptions o = LongJobOptions(3, "preset:small");
  o.timeout = std::chrono::milliseconds(700);
  absl::StatusOr<JobResult> got = Client().Submit(o, RandomTokens(32768, 256, 10), {});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  ExpectClusterStillWorks(Client(), 3);
}

// Every worker stopped (SIGSTOP) mid-compute: no worker can report a
// failure, and their TCP connections stay open; keepalive pings that go
// unanswered end the job well before its deadline (120 s), naming a
// worker as gone. (Not run again: there are no workers left to run it.)
TEST(ServiceStallTest, StoppedWorkersFailTheJobThroughKeepalive) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2, {}, "", {"--max-reruns", "0"});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  const ActedJob job = SubmitActingAtFirstLayer(client, LongJobOptions(2, "preset:small"),
                                                RandomTokens(65536, 256, 12), [&] {
                                                  cluster->SignalWorker(0, SIGSTOP);
                                                  cluster->SignalWorker(1, SIGSTOP);
                                                });
  cluster->SignalWorker(0, SIGCONT);
  cluster->SignalWorker(1, SIGCONT);
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  EXPECT_EQ(job.result.status().code(), absl::StatusCode::kUnavailable) << job.result.status();
  EXPECT_THAT(std::string(job.result.status().message()), HasSubstr(") is gone: "));
  EXPECT_LT(job.after_act, kKeepaliveTime + kKeepaliveTimeout + std::chrono::seconds(30))
      << "detected by keepalive, not at the job's deadline (120 s)";
  std::printf("stopped workers detected after %.1f s\n",
              std::chrono::duration<double>(job.after_act).count());
}

// One worker stopped mid-compute: its peer's collective times out (5 s
// here) and reports its group broken; the stopped worker, silent since,
// is the one blamed, as stalled, well before keepalive would notice.
TEST(ServiceStallTest, AStoppedWorkerIsBlamedAsStalled) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  const ActedJob job = SubmitActingAtFirstLayer(client, LongJobOptions(2, "preset:small"),
                                                RandomTokens(65536, 256, 13),
                                                [&] { cluster->SignalWorker(0, SIGSTOP); });
  cluster->SignalWorker(0, SIGCONT);
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  EXPECT_EQ(job.result.status().code(), absl::StatusCode::kUnavailable) << job.result.status();
  EXPECT_THAT(std::string(job.result.status().message()), HasSubstr(") stalled: it said nothing"));
  EXPECT_LT(job.after_act, kKeepaliveTime + kKeepaliveTimeout)
      << "blamed at the collective timeout";
}

// Kills worker 1 during the upload (0) or after the first layer (1).
class ServiceFaultTest : public ::testing::TestWithParam<int> {};

TEST_P(ServiceFaultTest, WorkerKilledMidJob) {
  const bool during_compute = GetParam() == 1;
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  std::atomic<bool> trigger{false};
  std::thread killer([&] {
    while (!trigger) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!during_compute) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cluster->KillWorker(1);
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobResult> got = client.Submit(
      LongJobOptions(2, "preset:small"), RandomTokens(65536, 256, 11), {},
      [&](const v1::Progress& p) {
        if (p.stage() == (during_compute ? v1::Progress::LAYERS : v1::Progress::UPLOAD))
          trigger = true;
      });
  trigger = true;  // in case the job ended before the trigger
  killer.join();
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("failed: worker 127.0.0.1:"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(") is gone: "));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << "no hang";
  // The survivor takes the next job alone.
  ExpectClusterStillWorks(std::move(client), 1);
}

INSTANTIATE_TEST_SUITE_P(Phases, ServiceFaultTest, ::testing::Values(0, 1), [](const auto& info) {
  return info.param == 0 ? "DuringUpload" : "DuringCompute";
});

// A worker that cannot run its backend refuses to start, naming the problem
// and the allowed values, before it registers anywhere.
TEST(WorkerStartup, UnusableBackendIsRefusedWithAMessage) {
  struct Case {
    std::string flags, message;
  };
  const std::vector<Case> cases = {
      {"--backend tpu", "unknown backend 'tpu' (allowed: cpu, cuda)"},
      // Every flag --help shows is taken (it is parsed before the backend).
      {"--retain-bytes 1000 --retain-bytes-per-tenant 500 --backend tpu", "unknown backend 'tpu'"},
#ifdef LACT_HAVE_CUDA
      {"--backend cuda --device 999", "no CUDA device 999"},
      {"--backend cuda --precision fp8", "unknown precision 'fp8' (allowed: fp32, bf16)"},
      {"--backend cuda --collective mpi", "unknown collective 'mpi' (allowed: gloo, nccl)"},
      {"--backend cuda --scan-math fp16", "unknown scan math 'fp16' (allowed: fp32, tf32x3, bf16)"},
#else
      {"--backend cuda", "this build has no CUDA backend"},
#endif
  };
  for (const Case& c : cases) {
    const std::string command =
        absl::StrCat(std::getenv("LACT_BIN_DIR") ? std::getenv("LACT_BIN_DIR") : LACT_BIN_DIR,
                     "/lact-worker --coordinator 127.0.0.1:1 ", c.flags, " 2>&1");
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[256];
    while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
    const int status = pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << c.flags << ": status " << status;
    EXPECT_THAT(output, HasSubstr(c.message)) << c.flags;
  }
}

}  // namespace
}  // namespace lact::testing
