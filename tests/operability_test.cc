// What an operator's tools see of a real local cluster over gRPC on
// 127.0.0.1: gRPC's standard health service on every port (per service,
// NOT_SERVING while a process drains), server reflection listing lact's
// services, `lact workers`, and every command's --help and --version.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/safetensors.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/metrics_scrape.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::string BinDir() {
  const char* dir = std::getenv("LACT_BIN_DIR");
  return dir != nullptr ? dir : LACT_BIN_DIR;
}

// grpc.health.v1.Health/Check of `service` at `address`: the status, or
// the call's error code as a negative number.
int HealthOf(const std::string& address, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&ctx, request, &response);
  return status.ok() ? response.status() : -status.error_code();
}

// The services server reflection lists at `address`.
std::vector<std::string> ReflectedServices(const std::string& address) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  std::vector<std::string> names;
  if (!stream->Write(request)) return names;
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  while (stream->Read(&response)) {
    for (const auto& s : response.list_services_response().service()) names.push_back(s.name());
  }
  EXPECT_TRUE(stream->Finish().ok());
  return names;
}

std::vector<std::string> WorkerAddresses(const LocalCluster& cluster) {
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = LactClient(cluster.address()).ListWorkers();
  EXPECT_TRUE(workers.ok()) << workers.status();
  std::vector<std::string> addresses;
  if (workers.ok()) {
    for (const v1::WorkerInfo& w : *workers) addresses.push_back(w.address());
  }
  return addresses;
}

class OperabilityTest : public ClusterSuite<2> {};

TEST_F(OperabilityTest, EveryPortAnswersHealthPerService) {
  const std::string coordinator = cluster_->address(), control = cluster_->control_address();
  ASSERT_NE(coordinator, control) << "lact local puts Control on a port of its own";
  EXPECT_EQ(HealthOf(coordinator, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthOf(coordinator, "lact.v1.CoordinatorService"), HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthOf(control, "lact.v1.ControlService"), HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthOf(coordinator, "lact.v1.NoSuchService"), -grpc::StatusCode::NOT_FOUND);
  const std::vector<std::string> workers = WorkerAddresses(*cluster_);
  ASSERT_EQ(workers.size(), 2u);
  for (const std::string& w : workers) {
    EXPECT_EQ(HealthOf(w, ""), HealthCheckResponse::SERVING) << w;
    EXPECT_EQ(HealthOf(w, "lact.v1.WorkerService"), HealthCheckResponse::SERVING) << w;
    EXPECT_EQ(HealthOf(w, "lact.v1.ShardDataService"), HealthCheckResponse::SERVING) << w;
  }
}

TEST_F(OperabilityTest, ReflectionListsTheServicesOfEachPort) {
  EXPECT_THAT(ReflectedServices(cluster_->address()),
              AllOf(::testing::Contains("lact.v1.CoordinatorService"),
                    ::testing::Contains("grpc.health.v1.Health")));
  EXPECT_THAT(ReflectedServices(cluster_->control_address()),
              ::testing::Contains("lact.v1.ControlService"));
  for (const std::string& w : WorkerAddresses(*cluster_)) {
    EXPECT_THAT(ReflectedServices(w), AllOf(::testing::Contains("lact.v1.WorkerService"),
                                            ::testing::Contains("lact.v1.ShardDataService")))
        << w;
  }
}

TEST_F(OperabilityTest, LactWorkersListsEveryWorker) {
  const std::vector<std::string> addresses = WorkerAddresses(*cluster_);
  ASSERT_EQ(addresses.size(), 2u);
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
      LactClient(cluster_->address()).ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const v1::WorkerInfo& w : *workers) {
    EXPECT_EQ(w.backend(), "cpu");
    EXPECT_TRUE(w.healthy()) << w.address();
    EXPECT_FALSE(w.leased()) << w.address();
    EXPECT_FALSE(w.draining()) << w.address();
    EXPECT_LT(w.seconds_since_heartbeat(), 5.0) << "heartbeats every 0.3 s here";
    EXPECT_THAT(w.models(), ::testing::Contains("preset:small"));
  }
  const CommandResult listed =
      RunCommand(absl::StrCat(BinDir(), "/lact workers --server ", cluster_->address(), " 2>&1"));
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("ADDRESS"));
  for (const std::string& a : addresses) {
    EXPECT_THAT(listed.output, HasSubstr(a));
  }
  EXPECT_THAT(listed.output, HasSubstr("healthy"));
  EXPECT_THAT(listed.output, HasSubstr("preset:small"));
}

// A scrape of the coordinator and of each worker after one job that
// succeeded and one Submit refused: the counters say what happened, to the
// byte, and the gauges what is there now.
TEST_F(OperabilityTest, MetricsScrapesCountJobsCallsAndBytes) {
  ASSERT_FALSE(cluster_->metrics_address().empty());
  LactClient client(cluster_->address());
  SubmitOptions o;
  o.model = "preset:small";
  o.workers = 2;
  const int64_t tokens = 4096;
  absl::StatusOr<JobResult> job = client.Submit(o, RandomTokens(tokens, 256, 7), {});
  ASSERT_TRUE(job.ok()) << job.status();
  o.model = "no-such-model";
  const absl::Status refused = client.Submit(o, RandomTokens(8, 256, 8), {}).status();
  ASSERT_FALSE(refused.ok());

  const std::string coordinator = Scrape(cluster_->metrics_address());
  EXPECT_EQ(Sample(coordinator, "lact_jobs_ended_total{status=\"succeeded\"}"), 1) << coordinator;
  EXPECT_EQ(Sample(coordinator, "lact_calls_total{code=\"OK\",method=\"Submit\"}"), 1);
  EXPECT_EQ(Sample(coordinator,
                   absl::StrCat("lact_calls_total{code=\"",
                                absl::StatusCodeToString(refused.code()), "\",method=\"Submit\"}")),
            1)
      << refused;
  EXPECT_EQ(Sample(coordinator, "lact_context_tokens_total"), tokens);
  EXPECT_EQ(Sample(coordinator, "lact_job_bytes_total{direction=\"in\"}"), tokens * 256 * 4);
  EXPECT_EQ(Sample(coordinator, "lact_job_seconds_count"), 1);
  EXPECT_EQ(Sample(coordinator, "lact_jobs{status=\"succeeded\"}"), 1);
  EXPECT_EQ(Sample(coordinator, "lact_jobs{status=\"running\"}"), 0);
  EXPECT_EQ(Sample(coordinator, "lact_workers{state=\"healthy\"}"), 2);
  EXPECT_EQ(Sample(coordinator, "lact_workers_leased"), 0);
  EXPECT_EQ(Sample(coordinator, "lact_retained_states"), 1);

  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  double bytes_in = 0, bytes_out = 0;
  for (const v1::WorkerInfo& w : *workers) {
    ASSERT_FALSE(w.metrics_address().empty()) << w.address();
    const std::string scrape = Scrape(w.metrics_address());
    EXPECT_EQ(Sample(scrape, "lact_worker_shards_total{code=\"OK\"}"), 1) << scrape;
    EXPECT_EQ(Sample(scrape, "lact_worker_shards_running"), 0);
    EXPECT_GT(Sample(scrape, "lact_worker_compute_seconds_total"), 0);
    EXPECT_GT(Sample(scrape, "lact_worker_peak_rss_bytes"), 0);
    EXPECT_GE(Sample(scrape, "lact_worker_retained_bytes"), 0);
    EXPECT_EQ(scrape.find("lact_worker_gpu_memory"), std::string::npos) << "a CPU worker";
    bytes_in += Sample(scrape, "lact_worker_bytes_total{direction=\"in\"}");
    bytes_out += Sample(scrape, "lact_worker_bytes_total{direction=\"out\"}");
  }
  EXPECT_EQ(bytes_in, tokens * 256 * 4) << "the shards' context bytes";
  EXPECT_EQ(bytes_out, tokens * 256 * 4) << "the shards' output bytes";
}

TEST_F(OperabilityTest, MetricsPortsAnswerHttpProbes) {
  std::vector<std::string> ports = {cluster_->metrics_address()};
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
      LactClient(cluster_->address()).ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const v1::WorkerInfo& w : *workers) ports.push_back(w.metrics_address());
  ASSERT_EQ(ports.size(), 3u);
  for (const std::string& p : ports) {
    EXPECT_EQ(HttpStatus(p, "/livez"), 200) << p;
    EXPECT_EQ(HttpStatus(p, "/readyz"), 200) << p;
    EXPECT_EQ(HttpStatus(p, "/no-such-path"), 404) << p;
  }
}

TEST(Help, EveryCommandAndBothServersAnswerHelpAndVersion) {
  const std::vector<std::string> commands = {"run",    "local",  "submit", "query",
                                             "status", "watch",  "fetch",  "cancel",
                                             "delete", "models", "workers"};
  for (const std::string& c : commands) {
    for (const char* flag : {"--help", "-h"}) {
      const CommandResult r = RunCommand(absl::StrCat(BinDir(), "/lact ", c, " ", flag));
      EXPECT_EQ(r.exit_code, 0) << c << " " << flag << ": " << r.output;
      EXPECT_THAT(r.output, HasSubstr(absl::StrCat("lact ", c, " "))) << c << " " << flag;
    }
  }
  const CommandResult all = RunCommand(absl::StrCat(BinDir(), "/lact --help"));
  EXPECT_EQ(all.exit_code, 0);
  for (const std::string& c : commands) EXPECT_THAT(all.output, HasSubstr("lact " + c)) << c;
  for (const char* server : {"lact-coordinator", "lact-worker"}) {
    for (const char* flag : {"--help", "-h"}) {
      const CommandResult r = RunCommand(absl::StrCat(BinDir(), "/", server, " ", flag));
      EXPECT_EQ(r.exit_code, 0) << server << " " << flag << ": " << r.output;
      EXPECT_THAT(r.output, AllOf(HasSubstr("usage:"), HasSubstr(server), HasSubstr("--port")));
    }
  }
  for (const char* program : {"lact", "lact-coordinator", "lact-worker"}) {
    const CommandResult r = RunCommand(absl::StrCat(BinDir(), "/", program, " --version"));
    EXPECT_EQ(r.exit_code, 0) << program;
    EXPECT_THAT(r.output,
                ::testing::ContainsRegex(absl::StrCat("^", program, " [0-9]+\\.[0-9]+\\.[0-9]+")));
  }
  const CommandResult unknown = RunCommand(absl::StrCat(BinDir(), "/lact frobnicate 2>&1"));
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.output, HasSubstr("unknown command 'frobnicate'"));
}

// A coordinator started alone with `flags`, its stdout and stderr in files
// of `dir`; its address once it listens ("" if it exited).
struct LoneCoordinator {
  pid_t pid = -1;
  std::string address, log;
};
LoneCoordinator StartCoordinator(const std::string& dir, const std::string& flags) {
  LoneCoordinator c;
  const std::string out = dir + "/out";
  c.log = dir + "/log";
  const CommandResult started = RunCommand(absl::StrCat(
      BinDir(), "/lact-coordinator --port 0 ", flags, " > ", out, " 2> ", c.log, " & echo $!"));
  c.pid = std::stoi(started.output);
  for (int i = 0; i < 100 && c.address.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("listening on ") != std::string::npos)
        c.address = line.substr(line.find("listening on ") + 13);
    }
  }
  return c;
}

// The coordinator's log: one JSON object per line, each with its time,
// level, process and event; a refused Submit is logged with its code, and
// its start, drain and stop too. --log-level error keeps the info lines out.
TEST(Logs, TheCoordinatorLogsJsonLinesWithEveryRefusalsCode) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/lact_logs_", getpid());
  std::filesystem::create_directories(dir + "/info");
  std::filesystem::create_directories(dir + "/error");
  LoneCoordinator c = StartCoordinator(dir + "/info", "--log-level info");
  ASSERT_FALSE(c.address.empty()) << "the coordinator did not start";
  SubmitOptions o;
  o.model = "preset:small";
  o.workers = 1;
  const absl::Status refused =
      LactClient(c.address).Submit(o, RandomTokens(8, 256, 9), {}).status();
  ASSERT_FALSE(refused.ok());
  kill(c.pid, SIGTERM);
  for (int i = 0; i < 100 && kill(c.pid, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream in(c.log);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    for (const char* key : {"time", "level", "process", "event"})
      EXPECT_TRUE(j.contains(key)) << key << " missing: " << line;
    EXPECT_EQ(j.value("process", ""), "lact-coordinator") << line;
    lines.push_back(std::move(j));
  }
  std::vector<std::string> events;
  for (const nlohmann::json& j : lines) events.push_back(j.value("event", ""));
  EXPECT_THAT(events, ::testing::IsSupersetOf(
                          {"listening", "started", "call_failed", "draining", "stopped"}));
  for (const nlohmann::json& j : lines) {
    if (j.value("event", "") != "call_failed") continue;
    EXPECT_EQ(j.value("method", ""), "Submit");
    EXPECT_EQ(j.value("code", ""), absl::StatusCodeToString(refused.code()));
    EXPECT_EQ(j.value("message", ""), std::string(refused.message()));
    EXPECT_EQ(j.value("level", ""), "warning");
  }

  LoneCoordinator quiet = StartCoordinator(dir + "/error", "--log-level error");
  ASSERT_FALSE(quiet.address.empty());
  kill(quiet.pid, SIGTERM);
  for (int i = 0; i < 100 && kill(quiet.pid, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream quiet_log(quiet.log);
  std::string text((std::istreambuf_iterator<char>(quiet_log)), {});
  EXPECT_EQ(text.find("\"started\""), std::string::npos) << text;

  const CommandResult bad =
      RunCommand(absl::StrCat(BinDir(), "/lact-coordinator --log-level loud 2>&1"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--log-level 'loud': one of debug, info, warn, error"));
  std::filesystem::remove_all(dir);
}

// A job of a few seconds on two one-thread workers.
// While a worker drains (SIGTERM mid-job) it says NOT_SERVING, and
// ListWorkers shows it draining; its peer stays SERVING and leased.
TEST(DrainHealth, ADrainingWorkerIsNotServing) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  const std::vector<std::string> addresses = WorkerAddresses(*cluster);
  ASSERT_EQ(addresses.size(), 2u);
  absl::StatusOr<std::vector<v1::WorkerInfo>> before = LactClient(cluster->address()).ListWorkers();
  ASSERT_TRUE(before.ok()) << before.status();
  LactClient client(cluster->address());
  std::vector<int> health, ready;
  std::vector<v1::WorkerInfo> listed;
  const ActedJob job =
      SubmitActingAtFirstLayer(client, LongJobOptions(2), RandomTokens(65536, 256, 97), [&] {
        cluster->SignalWorker(0, SIGTERM);
        // Until worker 0 says it drains (the job's shards keep both alive).
        WaitFor([&] {
          health.clear();
          ready.clear();
          for (const std::string& a : addresses)
            health.push_back(HealthOf(a, "lact.v1.WorkerService"));
          for (const v1::WorkerInfo& w : *before)
            ready.push_back(HttpStatus(w.metrics_address(), "/readyz"));
          absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
              LactClient(cluster->address()).ListWorkers();
          if (workers.ok()) listed = *workers;
          return absl::c_count(health, HealthCheckResponse::NOT_SERVING) == 1 &&
                 absl::c_count(ready, 503) == 1 &&
                 absl::c_count_if(listed, [](const v1::WorkerInfo& w) { return w.draining(); }) ==
                     1;
        });
      });
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  ASSERT_TRUE(job.result.ok()) << job.result.status();
  EXPECT_THAT(health,
              UnorderedElementsAre(HealthCheckResponse::SERVING, HealthCheckResponse::NOT_SERVING));
  EXPECT_THAT(ready, UnorderedElementsAre(200, 503)) << "/readyz mirrors the health service";
  ASSERT_EQ(listed.size(), 2u);
  int draining = 0, leased = 0;
  for (const v1::WorkerInfo& w : listed) {
    draining += w.draining() ? 1 : 0;
    leased += w.leased() ? 1 : 0;
    if (w.draining()) EXPECT_FALSE(w.healthy()) << "a draining worker takes no new work";
  }
  EXPECT_EQ(draining, 1);
  EXPECT_EQ(leased, 2) << "both still run the job's shards";
}

// While the coordinator drains, its public service is NOT_SERVING (a
// readiness probe takes it out of rotation) and Control stays SERVING
// (the running job's workers still need it).
TEST(DrainHealth, ADrainingCoordinatorIsNotServingButKeepsControl) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  int coordinator = -1, whole = -1, control = -1, ready = -1;
  const ActedJob job =
      SubmitActingAtFirstLayer(client, LongJobOptions(2), RandomTokens(65536, 256, 98), [&] {
        cluster->SignalCoordinator(SIGTERM);
        WaitFor([&] {  // until it says it drains (its job keeps it alive)
          coordinator = HealthOf(cluster->address(), "lact.v1.CoordinatorService");
          whole = HealthOf(cluster->address(), "");
          control = HealthOf(cluster->control_address(), "lact.v1.ControlService");
          ready = HttpStatus(cluster->metrics_address(), "/readyz");
          return coordinator == HealthCheckResponse::NOT_SERVING &&
                 whole == HealthCheckResponse::NOT_SERVING && ready == 503;
        });
      });
  ASSERT_TRUE(job.acted) << "the job ended before its first layer";
  ASSERT_TRUE(job.result.ok()) << job.result.status();
  EXPECT_EQ(coordinator, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(whole, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(control, HealthCheckResponse::SERVING);
  EXPECT_EQ(ready, 503) << "/readyz mirrors the health service";
  EXPECT_TRUE(cluster->CoordinatorExits(std::chrono::seconds(20)));
}

// A coordinator that drains while `lact submit` waits for its in-band job:
// the job finishes, and the command writes its --out file and exits 0 (it
// asks nothing more of the coordinator once the results are in).
TEST(DrainHealth, ADrainingCoordinatorLetsLactSubmitWriteItsOutput) {
  std::unique_ptr<LocalCluster> cluster = StartTestCluster(2);
  ASSERT_NE(cluster, nullptr);
  const std::string out =
      absl::StrCat(::testing::TempDir(), "/drain_submit_", getpid(), ".safetensors");
  const std::string command = absl::StrCat(
      BinDir(), "/lact submit --server ", cluster->address(),
      " --model preset:small:2 --context random:65536:99 --workers 2 --out ", out, " 2>&1");
  std::future<CommandResult> submit =
      std::async(std::launch::async, [&command] { return RunCommand(command); });
  LactClient client(cluster->address());
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    absl::StatusOr<std::vector<v1::JobInfo>> jobs = client.ListJobs();
    running = jobs.ok() && !jobs->empty() && jobs->front().status() == v1::JobInfo::RUNNING;
  }
  ASSERT_TRUE(running) << "the job never ran";
  cluster->SignalCoordinator(SIGTERM);
  const CommandResult submitted = submit.get();
  EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
  absl::StatusOr<SafetensorsFile> written = SafetensorsFile::Open(out);
  ASSERT_TRUE(written.ok()) << written.status() << "\n" << submitted.output;
  EXPECT_EQ(written->entries().count("output"), 1u);
  EXPECT_EQ(written->metadata().count("lact.config"), 1u);
  EXPECT_TRUE(cluster->CoordinatorExits(std::chrono::seconds(30)));
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace lact::testing
