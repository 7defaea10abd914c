// Where a long context's time goes, stage by stage and layer by layer:
// preset:small run by the CPU runner (the worker's code path, a group of
// one, the worker's tiles) over a short context (bench_ops' layer size,
// best of 3 runs) and a long one (one run, as a job does), in this one
// process. Per stage: the time per token at both lengths and their ratio,
// so what slows down at length shows as a ratio above 1.
//   bench_stages [--threads N] [--short T] [--long T] [--precision fp32|bf16]
//                [--json FILE]
// Defaults: 16,384 and 524,288 tokens (one worker's shard of the
// 1,048,576-token main job), fp32, every core.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/random.h"
#include "kernels/cpu/threading.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_runner.h"
#include "worker/schedule/stage_profile.h"

namespace lact::bench {
namespace {

constexpr int kStages = static_cast<int>(Stage::kCount);

struct Measured {
  StageProfile profile;
  double wall = 0;
};

Tensor RandomContext(int64_t tokens, int width) {
  Tensor t({tokens, width});
  Random r(11);
  for (float& v : t.data) v = static_cast<float>(r.Normal());
  return t;
}

absl::StatusOr<Measured> RunOnce(const Model& model, int64_t tokens, const BackendOptions& o) {
  Measured m;
  RunHooks hooks;
  hooks.profile = &m.profile;
  CpuRunner runner(model, model.config(), o, hooks);
  Tensor context = RandomContext(tokens, model.config().input_width());
  FusedState state;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Tensor> out = runner.RunContext(std::move(context), &state);
  m.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!out.ok()) return out.status();
  return m;
}

double PerToken(const StageProfile& p, Stage s, int64_t tokens) {
  return 1e6 * p.Total(s).seconds / static_cast<double>(tokens);
}

void Print(const Measured& small, int64_t short_tokens, const Measured& big, int64_t long_tokens,
           nlohmann::json* json) {
  std::printf("%-16s %14s %14s %8s %10s\n", "stage", "us/token short", "us/token long", "ratio",
              "long s");
  for (int s = 0; s < kStages; ++s) {
    const Stage stage = static_cast<Stage>(s);
    const double a = PerToken(small.profile, stage, short_tokens);
    const double b = PerToken(big.profile, stage, long_tokens);
    if (a == 0 && b == 0) continue;
    std::printf("%-16s %14.3f %14.3f %8.2f %10.2f\n", StageName(stage), a, b, a > 0 ? b / a : 0,
                big.profile.Total(stage).seconds);
    (*json)["stages"].push_back({{"stage", StageName(stage)},
                                 {"short_us_per_token", a},
                                 {"long_us_per_token", b},
                                 {"long_seconds", big.profile.Total(stage).seconds}});
  }
  const double a = 1e6 * small.wall / short_tokens, b = 1e6 * big.wall / long_tokens;
  std::printf("%-16s %14.3f %14.3f %8.2f %10.2f\n", "whole run", a, b, b / a, big.wall);
  (*json)["whole"] = {{"short_us_per_token", a},
                      {"long_us_per_token", b},
                      {"ratio", b / a},
                      {"long_seconds", big.wall}};
  for (int layer = 0; layer < big.profile.layers(); ++layer) {
    std::printf("layer %d:", layer);
    for (int s = 0; s < kStages; ++s) {
      const StageProfile::Cell& c = big.profile.At(layer, static_cast<Stage>(s));
      if (c.seconds > 0.005) std::printf(" %s %.2f s", StageName(static_cast<Stage>(s)), c.seconds);
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                                             {"threads", "short", "long", "precision", "json"});
  if (!flags.ok()) {
    std::fprintf(stderr, "bench_stages: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const int threads = static_cast<int>(flags->Int("threads", 0, 0, 1024).value_or(0));
  const int64_t short_tokens = flags->Int("short", 16384, 64, 1 << 24).value_or(16384);
  const int64_t long_tokens = flags->Int("long", 524288, 64, 1 << 24).value_or(524288);
  BackendOptions o;
  o.threads = threads;
  o.precision = flags->Get("precision").value_or("fp32");
  cpu::SetNumThreads(threads);
  absl::StatusOr<Model> model = MakePresetModel("small", 0);
  if (!model.ok()) {
    std::fprintf(stderr, "bench_stages: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Measured> best;
  for (int run = 0; run < 3; ++run) {
    absl::StatusOr<Measured> m = RunOnce(*model, short_tokens, o);
    if (!m.ok()) {
      std::fprintf(stderr, "bench_stages: %s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    if (!best.ok() || m->wall < best->wall) best = std::move(m);
  }
  absl::StatusOr<Measured> big = RunOnce(*model, long_tokens, o);
  if (!big.ok()) {
    std::fprintf(stderr, "bench_stages: %s\n", std::string(big.status().message()).c_str());
    return 1;
  }
  std::printf(
      "preset:small, %s, %d threads: %lld tokens (best of 3) against %lld tokens (one "
      "run)\n",
      o.precision.c_str(), cpu::NumThreads(), static_cast<long long>(short_tokens),
      static_cast<long long>(long_tokens));
  nlohmann::json json = {{"precision", o.precision},
                         {"threads", cpu::NumThreads()},
                         {"short_tokens", short_tokens},
                         {"long_tokens", long_tokens}};
  Print(*best, short_tokens, *big, long_tokens, &json);
  if (std::optional<std::string> path = flags->Get("json"))
    std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace lact::bench

int main(int argc, char** argv) { return lact::bench::Main(argc, argv); }
