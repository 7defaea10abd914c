// `lact run` as a user runs it: the real binary on every golden case (job
// options passed as flags), with --threads 1 and 2, output file read back and
// compared with expected.safetensors; and its usage errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model_config.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/golden_case.h"
#include "tests/service_support.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

CommandResult RunLact(const std::string& args) {
  return RunCommand(absl::StrCat(LACT_CLI_PATH, " ", args, " 2>&1"));
}

// The flags that give `lact run` and `lact submit` a golden case's query
// files (in its folder `dir`) and job options.
std::string GoldenCaseFlags(const std::string& dir, const GoldenCase& golden) {
  std::string flags;
  for (size_t k = 0; k < golden.queries.size(); ++k)
    absl::StrAppend(&flags, " --query ", dir, "/query_", k, ".npy");
  if (golden.options.muon_steps)
    absl::StrAppend(&flags, " --muon-steps ", *golden.options.muon_steps);
  if (golden.options.chunk_tokens)
    absl::StrAppend(&flags, " --chunk-tokens ", *golden.options.chunk_tokens);
  return flags;
}

// `lact ARGS --json`: its stdout parsed (progress and notes on stderr are
// dropped); a failure when it exits non-zero or prints anything but one
// JSON object.
nlohmann::json RunLactJson(const std::string& args) {
  CommandResult r = RunLact(absl::StrCat(args, " --json 2>/dev/null; true"));
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << args << " printed: " << r.output;
  return j;
}

// What `lact submit --json` and the other commands' --json print for a
// job of `name` (golden model, context without queries) on 2 of 3 workers.
void ExpectJsonSummaries(const std::string& server, const std::string& name,
                         const std::string& scratch) {
  const std::string dir = GoldenDir() + "/" + name;
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int64_t L = golden->context.dim(0);
  const nlohmann::json submit =
      RunLactJson(absl::StrCat("submit --server ", server, " --model ", name, " --context ", dir,
                               "/context.npy --workers 2 --out ", scratch, "/json.safetensors"));
  ASSERT_TRUE(submit.contains("job_id")) << submit;
  const std::string job = submit["job_id"];
  EXPECT_EQ(job.rfind("job-", 0), 0u) << job;
  EXPECT_EQ(submit["status"], "SUCCEEDED");
  EXPECT_EQ(submit["model"], name);
  EXPECT_EQ(submit["workers"], 2);
  EXPECT_EQ(submit["context_tokens"], L);
  EXPECT_EQ(submit["out"], scratch + "/json.safetensors");
  EXPECT_GT(submit["stats"]["seconds"].get<double>(), 0);
  EXPECT_EQ(submit["stats"]["coordinator_payload_bytes"], "0");  // int64: a string

  const nlohmann::json status =
      RunLactJson(absl::StrCat("status --server ", server, " --job ", job));
  ASSERT_EQ(status["jobs"].size(), 1u) << status;
  EXPECT_EQ(status["jobs"][0]["job_id"], job);
  EXPECT_EQ(status["jobs"][0]["status"], "SUCCEEDED");
  EXPECT_EQ(status["jobs"][0]["context_tokens"], std::to_string(L));
  EXPECT_EQ(RunLactJson(absl::StrCat("watch --server ", server, " --job ", job))["status"],
            "SUCCEEDED");

  const nlohmann::json workers = RunLactJson(absl::StrCat("workers --server ", server));
  ASSERT_EQ(workers["workers"].size(), 3u) << workers;
  for (const nlohmann::json& w : workers["workers"]) {
    EXPECT_EQ(w["healthy"], true) << w;
    EXPECT_EQ(w["backend"], "cpu") << w;
  }
  const nlohmann::json models = RunLactJson(absl::StrCat("models --server ", server));
  bool listed = false;
  for (const nlohmann::json& m : models["models"]) listed |= m["name"] == name;
  EXPECT_TRUE(listed) << models;

  const nlohmann::json fetch = RunLactJson(absl::StrCat(
      "fetch --server ", server, " --job ", job, " --out ", scratch, "/json.fetched.safetensors"));
  EXPECT_EQ(fetch["job_id"], job);
  EXPECT_EQ(fetch["outputs"], true);
  EXPECT_EQ(fetch["query_sets"], 0);
  EXPECT_EQ(fetch["workers"], 2);
  const nlohmann::json deleted =
      RunLactJson(absl::StrCat("delete --server ", server, " --job ", job));
  EXPECT_EQ(deleted["deleted"], true);
  EXPECT_EQ(RunLact(absl::StrCat("status --json --server ", server, " --job ", job)).exit_code, 2)
      << "deleted";

  const nlohmann::json run = RunLactJson(absl::StrCat(
      "run --model preset:small --context random:8 --out ", scratch, "/run.safetensors"));
  EXPECT_EQ(run["context_tokens"], 8);
  EXPECT_GT(run["tokens_per_second"].get<double>(), 0);
  // bf16 on the CPU says how it runs on this machine: on AMX and AMD's
  // AVX512_BF16 through oneDNN's bf16 matmul, elsewhere emulated
  // (cpu_runner.h, bf16_matmul.h).
  CommandResult bf16 =
      RunLact(absl::StrCat("run --model preset:small --context random:8 ",
                           "--precision bf16 --out ", scratch, "/bf16.safetensors"));
  EXPECT_EQ(bf16.exit_code, 0) << bf16.output;
  const std::string mode = CpuBf16Mode();
  EXPECT_THAT(mode, ::testing::AnyOf(::testing::StartsWith("emulated"),
                                     ::testing::StartsWith("oneDNN bf16 matmul")));
  EXPECT_THAT(bf16.output, ::testing::HasSubstr("lact run: cpu backend, bf16, " + mode));
}

class CliGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CliGoldenTest, ReproducesExpected) {
  const auto& [name, threads] = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string dir = GoldenDir() + "/" + name;
  const std::string out =
      absl::StrCat(::testing::TempDir(), "/lact_cli_", getpid(), "_", name, ".safetensors");
  CommandResult r = RunLact(absl::StrCat("run --model ", dir, "/model.safetensors --context ", dir,
                                         "/context.npy --threads ", threads, " --out ", out,
                                         GoldenCaseFlags(dir, *golden)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("tokens/s"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("peak RSS"));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->entries().size(), golden->expected.size());
  for (const auto& [tensor_name, want] : golden->expected) {
    absl::StatusOr<Tensor> got = file->ReadFloat(tensor_name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(file->entries().at(tensor_name).dtype, DType::kF32);
    EXPECT_LE(RelativeError(*got, want), 1e-4) << name << " " << tensor_name;
  }
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Golden, CliGoldenTest,
                         ::testing::Combine(::testing::ValuesIn(GoldenCaseNames()),
                                            ::testing::Values(1, 2)));

// The path a new user takes: `lact local --workers 3`, then `lact submit`
// of every golden case (the CLI's output file read back), then each
// command's --json summary.
// `lact local ARGS` in the background, its output in `log`: its pid and
// the coordinator's address (empty when it did not say within 30 s).
struct LocalProcess {
  long pid = 0;
  std::string server;
};

LocalProcess StartLocal(const std::string& args, const std::string& log) {
  LocalProcess local;
  const std::string start =
      absl::StrCat(LACT_CLI_PATH, " local ", args, " > ", log, " 2>&1 & echo $!");
  FILE* pipe = popen(start.c_str(), "r");
  if (fscanf(pipe, "%ld", &local.pid) != 1) local.pid = 0;
  pclose(pipe);
  for (int i = 0; i < 300 && local.server.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("coordinator at ");
    if (at != std::string::npos) {
      local.server = text.substr(at + 15, text.find(' ', at + 15) - at - 15);
    }
  }
  return local;
}

void StopLocal(long pid) {
  kill(static_cast<pid_t>(pid), SIGTERM);
  for (int i = 0; i < 100 && kill(static_cast<pid_t>(pid), 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// lact local --auth-tokens FILE: its public port takes only that file's tokens.
TEST(CliService, LocalRequiresTheTokensItIsGiven) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/lact_cli_tokens_", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokens") << "tenant-a cli-test-token-0123456789abcdef\n";
  std::ofstream(dir + "/token") << "cli-test-token-0123456789abcdef\n";
  const LocalProcess local =
      StartLocal(absl::StrCat("--workers 1 --auth-tokens ", dir, "/tokens"), dir + "/local.log");
  ASSERT_FALSE(local.server.empty()) << "lact local --auth-tokens did not start";
  const CommandResult without = RunLact(absl::StrCat("workers --server ", local.server));
  EXPECT_EQ(without.exit_code, 2) << without.output;
  EXPECT_THAT(without.output, ::testing::HasSubstr("bearer token"));
  const CommandResult with =
      RunLact(absl::StrCat("workers --server ", local.server, " --token-file ", dir, "/token"));
  EXPECT_EQ(with.exit_code, 0) << with.output;
  StopLocal(local.pid);
  std::filesystem::remove_all(dir);
}

TEST(CliService, SubmitGoldenCasesToLocalCluster) {
  const std::string models = absl::StrCat(::testing::TempDir(), "/lact_cli_models_", getpid());
  std::filesystem::create_directories(models);
  for (const std::string& name : GoldenCaseNames()) {
    std::filesystem::create_symlink(GoldenDir() + "/" + name + "/model.safetensors",
                                    models + "/" + name + ".safetensors");
  }
  const LocalProcess local =
      StartLocal(absl::StrCat("--workers 3 --threads-per-worker 1 --model-dir ", models,
                              " --data-root ", models, " --warm-bytes 67108864"),
                 models + "/local.log");
  const long pid = local.pid;
  const std::string& server = local.server;
  ASSERT_FALSE(server.empty()) << "lact local did not start";
  {
    std::ifstream in(models + "/local.log");
    const std::string log((std::istreambuf_iterator<char>(in)), {});
    const std::regex warmed("\"event\":\"heap_warmed\",\"bytes\":67108864,");
    EXPECT_EQ(
        std::distance(std::sregex_iterator(log.begin(), log.end(), warmed), std::sregex_iterator()),
        3)
        << "every worker warms --warm-bytes before it registers:\n"
        << log;
  }
  for (const std::string& name : GoldenCaseNames()) {
    absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    const std::string dir = GoldenDir() + "/" + name,
                      out = models + "/" + name + ".out.safetensors";
    CommandResult r = RunLact(absl::StrCat("submit --server ", server, " --model ", name,
                                           " --context ", dir, "/context.npy --workers 3 --out ",
                                           out, GoldenCaseFlags(dir, *golden)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, ::testing::HasSubstr("done on 3 workers"));
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out);
    ASSERT_TRUE(file.ok()) << file.status();
    for (const auto& [tensor_name, want] : golden->expected) {
      absl::StatusOr<Tensor> got = file->ReadFloat(tensor_name);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(RelativeError(*got, want), 1e-4) << name << " " << tensor_name;
    }
    // The effective config, as lact run writes it, in submit's and fetch's outputs.
    const std::string want_config = ModelConfigToJson(golden->config);
    ASSERT_EQ(file->metadata().count("lact.config"), 1u) << name;
    EXPECT_EQ(file->metadata().at("lact.config"), want_config) << name;
    const std::regex job_line("(^|\n)(job-[0-9a-f]{32})\n");
    std::smatch job;
    ASSERT_TRUE(std::regex_search(r.output, job, job_line)) << r.output;
    const std::string fetched = models + "/" + name + ".fetched.safetensors";
    CommandResult f = RunLact(
        absl::StrCat("fetch --server ", server, " --job ", job[2].str(), " --out ", fetched));
    ASSERT_EQ(f.exit_code, 0) << f.output;
    absl::StatusOr<SafetensorsFile> fetched_file = SafetensorsFile::Open(fetched);
    ASSERT_TRUE(fetched_file.ok()) << fetched_file.status();
    ASSERT_EQ(fetched_file->metadata().count("lact.config"), 1u) << name;
    EXPECT_EQ(fetched_file->metadata().at("lact.config"), want_config) << name;
  }
  ExpectJsonSummaries(server, GoldenCaseNames().front(), models);
  // Outputs large enough that each shard's aligned middle goes straight to
  // the disk as it arrives, the shards' boundary inside a disk block: the
  // file submit wrote holds what the workers retained (fetch), bit for bit.
  {
    const std::string out = models + "/large.safetensors",
                      fetched = models + "/large.fetched.safetensors";
    CommandResult r = RunLact(absl::StrCat("submit --server ", server,
                                           " --model preset:small --context random:20003:5 "
                                           "--workers 2 --out ",
                                           out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
    const std::regex job_line("(^|\n)(job-[0-9a-f]{32})\n");
    std::smatch job;
    ASSERT_TRUE(std::regex_search(r.output, job, job_line)) << r.output;
    CommandResult f = RunLact(
        absl::StrCat("fetch --server ", server, " --job ", job[2].str(), " --out ", fetched));
    ASSERT_EQ(f.exit_code, 0) << f.output;
    absl::StatusOr<SafetensorsFile> streamed = SafetensorsFile::Open(out);
    absl::StatusOr<SafetensorsFile> whole = SafetensorsFile::Open(fetched);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ(streamed->entries().size(), whole->entries().size());
    for (const auto& [tensor_name, entry] : whole->entries()) {
      absl::StatusOr<Tensor> a = streamed->ReadFloat(tensor_name),
                             b = whole->ReadFloat(tensor_name);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->shape, b->shape) << tensor_name;
      EXPECT_TRUE(a->data == b->data) << tensor_name << " differs between submit and fetch";
    }
    EXPECT_EQ(streamed->ReadFloat("output")->shape, (std::vector<int64_t>{20003, 256}));
    // The context went row by row as it was made: `lact run`, which holds
    // the same random context whole, computes the same outputs.
    const std::string alone = models + "/large.run.safetensors";
    CommandResult run = RunLact(absl::StrCat(
        "run --model preset:small --context random:20003:5 --threads 1 --out ", alone));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    absl::StatusOr<SafetensorsFile> in_process = SafetensorsFile::Open(alone);
    ASSERT_TRUE(in_process.ok()) << in_process.status();
    EXPECT_LE(RelativeError(*streamed->ReadFloat("output"), *in_process->ReadFloat("output")),
              1e-4);
  }
  // A detached job whose bytes all go by reference: submit returns its id
  // once admitted, watch follows it to the end, the workers wrote the output.
  {
    const std::string name = GoldenCaseNames().front();
    absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    std::filesystem::copy_file(GoldenDir() + "/" + name + "/context.npy",
                               models + "/detached_context.npy");
    CommandResult d = RunLact(absl::StrCat("submit --server ", server, " --model ", name,
                                           " --context-ref detached_context.npy --out-ref "
                                           "detached_output.npy --detach"));
    ASSERT_EQ(d.exit_code, 0) << d.output;
    const std::regex job_line("(^|\n)(job-[0-9a-f]{32})\n");
    std::smatch job;
    ASSERT_TRUE(std::regex_search(d.output, job, job_line)) << d.output;
    CommandResult w = RunLact(absl::StrCat("watch --server ", server, " --job ", job[2].str()));
    ASSERT_EQ(w.exit_code, 0) << w.output;
    absl::StatusOr<Tensor> output = ReadNpy(models + "/detached_output.npy");
    ASSERT_TRUE(output.ok()) << output.status();
    EXPECT_LE(RelativeError(*output, golden->expected.at("output")), 1e-4);
  }
  StopLocal(pid);
  std::filesystem::remove_all(models);
}

TEST(CliErrors, NameTheProblem) {
  const std::string golden = GoldenDir() + "/tiny";
  struct Case {
    std::string args, message;
  } cases[] = {
      {"frobnicate", "unknown command 'frobnicate'"},
      {"run --model preset:small --context random:8", "missing required flag --out"},
      {"run --model preset:small --context random:8 --out /tmp/x.safetensors --colour red",
       "unknown flag --colour"},
      {"run --model preset:small --context random:8 --out /tmp/x.safetensors --threads many",
       "--threads 'many' must be an integer in [0, 1024]"},
      {"run --model preset:small --context random:0 --out /tmp/x.safetensors",
       "expected random:L[:SEED] with 1 <= L"},
      {"run --model /nonexistent.safetensors --context random:8 --out /tmp/x.safetensors",
       "cannot open '/nonexistent.safetensors'"},
      {"run --model preset:small --context " + golden + "/context.npy --out /tmp/x.safetensors",
       "context has shape [37, 32]; the model takes [L, 256] tokens"},
      {"run --model preset:small --context random:4 --muon-steps -2 --out /tmp/x.safetensors",
       "--muon-steps '-2' must be"},
      {"run --model preset:small --context random:4 --out", "flag --out needs a value"},
      // Outputs are checked before any compute, and must be safetensors.
      {"run --model preset:small --context random:4 --out /tmp/y.npy",
       "--out /tmp/y.npy: lact writes safetensors files; name it NAME.safetensors"},
      {"run --model preset:small --context random:4 --out /nonexistent/dir/x.safetensors",
       "--out /nonexistent/dir/x.safetensors cannot be created: No such file or directory"},
      {"run --model preset:small --context /nonexistent.npy --out /tmp/x.safetensors",
       "cannot open '/nonexistent.npy'"},
      // The CPU backend refuses what it would otherwise ignore.
      {"run --model preset:small --context random:4 --precision fp16 --out /tmp/x.safetensors",
       "unknown precision 'fp16' (allowed: fp32, bf16)"},
      {"run --model preset:small --context random:4 --scan-math tf32x3 --out /tmp/x.safetensors",
       "the CPU backend's SSD scan is fp32"},
      {"submit --server 127.0.0.1:1 --model preset:small --context random:4 --out /tmp/y.npy",
       "lact writes safetensors files"},
      {"fetch --server 127.0.0.1:1 --job j --out /nonexistent/dir/x.safetensors",
       "cannot be created"},
  };
  for (const Case& c : cases) {
    CommandResult r = RunLact(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": bad input exits 2\n" << r.output;
    EXPECT_THAT(r.output, ::testing::HasSubstr(c.message)) << c.args;
    EXPECT_THAT(r.output, ::testing::Not(::testing::HasSubstr("layer 1/"))) << "before any compute";
  }
  // Nothing listens there: the command says where it looked, within seconds.
  const auto start = std::chrono::steady_clock::now();
  CommandResult r = RunLact("status --server 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("no coordinator answers at 127.0.0.1:1 within 5 s"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace
}  // namespace lact::testing
