#include "tests/service_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "client/local_cluster.h"

namespace lact::testing {

std::string ModelDir() {
  static const std::string dir = [] {
    const std::string d = absl::StrCat(::testing::TempDir(), "/lact_models_", getpid());
    std::filesystem::remove_all(d);  // left by an earlier process with the same pid
    std::filesystem::create_directories(d);
    for (const std::string& name : GoldenCaseNames()) {
      std::filesystem::create_symlink(GoldenDir() + "/" + name + "/model.safetensors",
                                      d + "/" + name + ".safetensors");
    }
    return d;
  }();
  return dir;
}

void ExpectSameResults(const JobResult& got, const JobResult& want) {
  EXPECT_EQ(got.output.shape, want.output.shape);
  EXPECT_TRUE(got.output.data == want.output.data) << "outputs differ";
  ASSERT_EQ(got.queries.size(), want.queries.size());
  for (size_t k = 0; k < want.queries.size(); ++k)
    EXPECT_TRUE(got.queries[k].data == want.queries[k].data) << k;
  ASSERT_EQ(got.state.size(), want.state.size());
  for (const auto& [name, t] : want.state) EXPECT_TRUE(got.state.at(name).data == t.data) << name;
}

void ExpectGolden(const GoldenCase& golden, const JobResult& got) {
  EXPECT_LE(RelativeError(got.output, golden.expected.at("output")), 1e-4);
  ASSERT_EQ(got.queries.size(), golden.queries.size());
  for (size_t k = 0; k < got.queries.size(); ++k) {
    EXPECT_LE(RelativeError(got.queries[k], golden.expected.at(absl::StrCat("query_", k))), 1e-4)
        << k;
  }
  for (const auto& [name, want] : golden.expected) {
    if (name == "output" || name.rfind("query_", 0) == 0) continue;
    ASSERT_TRUE(got.state.count(name)) << name;
    EXPECT_LE(RelativeError(got.state.at(name), want), 1e-4) << name;
  }
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

SubmitOptions GoldenOptions(const GoldenCase& golden) {
  SubmitOptions o;
  o.model = golden.name;
  o.options = golden.options;
  o.timeout = std::chrono::seconds(60);
  return o;
}

std::unique_ptr<LocalCluster> StartTestCluster(LocalClusterOptions options) {
  if (options.model_dir.empty()) options.model_dir = ModelDir();
  if (options.threads_per_worker == 0) options.threads_per_worker = 1;
  const char* bin_dir = std::getenv("LACT_BIN_DIR");  // a moved build (scripts/gpu-check's bundle)
  if (options.bin_dir.empty()) options.bin_dir = bin_dir != nullptr ? bin_dir : LACT_BIN_DIR;
  const std::vector<std::pair<std::string, std::string>> defaults = {
      {"--collective-timeout-ms", "5000"},
      {"--acquire-timeout-ms", "5000"},
      {"--heartbeat-ms", "300"},
      {"--upload-idle-timeout-ms", "1000"}};
  std::vector<std::string> args;
  for (const auto& [flag, value] : defaults) {
    if (absl::c_linear_search(options.coordinator_args, flag)) continue;  // the caller's wins
    args.insert(args.end(), {flag, value});
  }
  args.insert(args.end(), options.coordinator_args.begin(), options.coordinator_args.end());
  options.coordinator_args = std::move(args);
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

std::unique_ptr<LocalCluster> StartTestCluster(int workers, std::vector<std::string> worker_args,
                                               std::string data_root,
                                               std::vector<std::string> coordinator_args,
                                               std::string token) {
  LocalClusterOptions options;
  options.workers = workers;
  options.worker_args = std::move(worker_args);
  options.data_root = std::move(data_root);
  options.coordinator_args = std::move(coordinator_args);
  options.token = std::move(token);
  return StartTestCluster(std::move(options));
}

SubmitOptions LongJobOptions(int workers, const std::string& model) {
  SubmitOptions o;
  o.model = model;
  o.workers = workers;
  o.timeout = std::chrono::seconds(120);
  return o;
}

CommandResult RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) output.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

ActedJob SubmitActingAtFirstLayer(LactClient& client, const SubmitOptions& options,
                                  const Tensor& context, const std::function<void()>& act) {
  ActedJob job;
  std::chrono::steady_clock::time_point acted_at;
  job.result = client.Submit(options, context, {}, [&](const v1::Progress& p) {
    if (p.stage() == v1::Progress::LAYERS && !job.acted) {
      job.acted = true;
      acted_at = std::chrono::steady_clock::now();
      act();
    }
  });
  if (job.acted) job.after_act = std::chrono::steady_clock::now() - acted_at;
  return job;
}

}  // namespace lact::testing
