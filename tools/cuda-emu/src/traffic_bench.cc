// The CUDA backend's launches and global-memory traffic by kernel family,
// on the emulator, where no GPU is: preset:base through the real CudaRunner
// on a `--tokens` context (default 131,072) in `--tile`-token tiles
// (default 65,536, the GPU worker's) in bf16
// precision, with the fp32 scan and with the bf16 one, in a dry run (every
// kernel and GEMM checked and counted, none run). For each family it prints
// launches per tile and the bytes its arguments name (kernels/cuda/traffic.h)
// per token and layer; then the totals beside the budget of
// docs/performance.md: at most 1,000 launches per tile, and the memory-bound
// passes (all but the GEMMs and the scan) within what 0.38 s of a 1M-token
// job moves at 85% of an H200's 4.3 TB/s copy rate.
//
// First it checks the accounting itself: a small model run for real and
// dry notes the same table, and the table's launches are the emulator's own
// count of kernels and GEMMs. Exits 1 when either fails. The emulator
// fills every allocation, so a 65,536-token tile takes about a minute;
// smaller tiles show the same launches per tile for the bf16 scan.
//   cuda_traffic_emu [--tokens N] [--tile N] [--json FILE]
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/model.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "emu_counts.h"
#include "kernels/cuda/traffic.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/cuda_runner.h"

namespace lact {
namespace {

constexpr int64_t kLaunchBudget = 1000;
// 0.38 s of a 1,048,576-token preset:base job (12 layers) at 85% of 4.3 TB/s.
constexpr double kPassBytesPerTokenLayer = 0.38 * 0.85 * 4.3e12 / 1048576 / 12;

using Table = std::map<std::string, cuda::FamilyTraffic>;

struct Run {
  Table table;
  emu::WorkCounts counts;
};

struct Case {
  const char* precision;
  const char* scan_math;
};

absl::StatusOr<Run> RunOnce(const Model& model, const Case& c, int64_t tokens, int64_t tile,
                            bool dry) {
  BackendOptions options{.backend = "cuda", .tile_tokens = tile, .precision = c.precision};
  options.scan_math = c.scan_math;
  // A dry run uploads the weights dry too (their bf16 rounding not run).
  emu::SetDryRun(dry);
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner =
      CudaRunner::Create(model, model.config(), options);
  Tensor context({tokens, model.config().input_width()});
  Random r(7);
  for (float& v : context.data) v = static_cast<float>(2 * r.Uniform() - 1);
  cuda::ResetTraffic();
  emu::ResetCounts();
  FusedState state;
  const absl::Status status =
      runner.ok() ? (*runner)->RunContext(std::move(context), &state).status() : runner.status();
  emu::SetDryRun(false);
  LACT_RETURN_IF_ERROR(status);
  return Run{cuda::TrafficByFamily(), emu::Counts()};
}

int64_t Launches(const Table& t) {
  int64_t n = 0;
  for (const auto& [family, f] : t) n += f.launches;
  return n;
}

// A small model (every part of a layer, LaCT over two chunks) run for
// real and dry over three tiles: the same table, and launches that are the
// emulator's own count.
absl::Status VerifyAccounting() {
  const ModelConfig config{.d_model = 64,
                           .n_layers = 1,
                           .ssm = {.head_dim = 16, .d_state = 16},
                           .ttt = {.head_dim = 32, .chunk_tokens = 80},
                           .mlp_hidden = 128};
  LACT_ASSIGN_OR_RETURN(Model model, MakeRandomModel(config, 3));
  for (const Case& c : {Case{"fp32", "fp32"}, Case{"bf16", "fp32"}, Case{"bf16", "bf16"}}) {
    const std::string name = absl::StrCat(c.precision, " precision, ", c.scan_math, " scan");
    LACT_ASSIGN_OR_RETURN(const Run real, RunOnce(model, c, 150, 64, /*dry=*/false));
    LACT_ASSIGN_OR_RETURN(const Run dry, RunOnce(model, c, 150, 64, /*dry=*/true));
    const int64_t counted = real.counts.kernels + real.counts.gemms;
    if (Launches(real.table) != counted) {
      return absl::InternalError(absl::StrCat(name, ": traffic.h noted ", Launches(real.table),
                                              " launches; the emulator ran ", counted,
                                              " kernels and GEMMs (a wrapper notes wrongly)"));
    }
    if (real.table != dry.table) {
      return absl::InternalError(absl::StrCat(name, ": the dry run noted other traffic"));
    }
    std::printf("accounting %s: %lld launches noted and run, dry run alike\n", name.c_str(),
                static_cast<long long>(counted));
  }
  return absl::OkStatus();
}

bool IsGemm(const std::string& family) { return family.rfind("GEMM", 0) == 0; }
bool IsScan(const std::string& family) {
  return family.rfind("Ssd", 0) == 0 || family == "PassSegmentStates" || family == "ScanRecurrence";
}

// Prints `run`'s table per tile and per token and layer; returns it as JSON.
nlohmann::json Report(const Run& run, const Case& c, int64_t tokens, int64_t tile, int layers) {
  const double tiles = std::ceil(static_cast<double>(tokens) / tile);
  const double per = static_cast<double>(tokens) * layers;
  std::printf("\npreset:base, %lld tokens in %.0f tiles of %lld, %s precision, %s scan\n",
              static_cast<long long>(tokens), tiles, static_cast<long long>(tile), c.precision,
              c.scan_math);
  std::printf("%-28s %14s %18s %18s\n", "family", "launches/tile", "read B/token/layer",
              "written B/token/layer");
  nlohmann::json families = nlohmann::json::object();
  double pass_bytes = 0;
  for (const auto& [family, f] : run.table) {
    std::printf("%-28s %14.1f %18.1f %18.1f\n", family.c_str(), f.launches / tiles,
                f.bytes_read / per, f.bytes_written / per);
    families[family] = {{"launches_per_tile", f.launches / tiles},
                        {"read_bytes_per_token_layer", f.bytes_read / per},
                        {"written_bytes_per_token_layer", f.bytes_written / per}};
    if (!IsGemm(family) && !IsScan(family)) pass_bytes += (f.bytes_read + f.bytes_written) / per;
  }
  const double copies = static_cast<double>(run.counts.device_copies + run.counts.memsets);
  const double launches = (Launches(run.table) + copies) / tiles;
  std::printf("%-28s %14.1f\n", "device copies and memsets", copies / tiles);
  std::printf("launches per tile: %.1f (budget %lld for 65,536 tokens: %s)\n", launches,
              static_cast<long long>(kLaunchBudget), launches <= kLaunchBudget ? "within" : "over");
  std::printf("memory-bound passes: %.0f B/token/layer (budget %.0f: %s)\n", pass_bytes,
              kPassBytesPerTokenLayer, pass_bytes <= kPassBytesPerTokenLayer ? "within" : "over");
  return {{"precision", c.precision},
          {"scan_math", c.scan_math},
          {"tokens", tokens},
          {"tile", tile},
          {"families", families},
          {"launches_per_tile", launches},
          {"launch_budget", kLaunchBudget},
          {"pass_bytes_per_token_layer", pass_bytes},
          {"pass_bytes_budget", kPassBytesPerTokenLayer}};
}

// The preset's shapes with zero weights: a dry run reads no values, and
// drawing preset:base's random ones here takes longer than the run.
absl::StatusOr<Model> ZeroModel(const std::string& preset) {
  LACT_ASSIGN_OR_RETURN(const ModelConfig config, PresetConfig(preset));
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, shape] : ExpectedTensors(config)) tensors[name] = Tensor(shape);
  return Model::FromTensors(config, std::move(tensors));
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cuda_traffic_emu: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags =
      Flags::Parse(std::vector<std::string>(argv + 1, argv + argc), {"json", "tokens", "tile"});
  absl::StatusOr<int64_t> tokens =
      flags.ok() ? flags->Int("tokens", 131072, 1, int64_t{1} << 22) : flags.status();
  if (!tokens.ok()) return Fail(tokens.status());
  absl::StatusOr<int64_t> tile = flags->Int("tile", 65536, 1, int64_t{1} << 20);
  if (!tile.ok()) return Fail(tile.status());
  if (cudaSetDevice(0) != cudaSuccess) return Fail(absl::InternalError("no emulated device"));
  if (absl::Status s = VerifyAccounting(); !s.ok()) return Fail(s);
  absl::StatusOr<Model> model = ZeroModel("base");
  if (!model.ok()) return Fail(model.status());
  nlohmann::json all = nlohmann::json::array();
  for (const Case& c : {Case{"bf16", "fp32"}, Case{"bf16", "bf16"}}) {
    absl::StatusOr<Run> run = RunOnce(*model, c, *tokens, *tile, /*dry=*/true);
    if (!run.ok()) return Fail(run.status());
    all.push_back(Report(*run, c, *tokens, *tile, model->config().n_layers));
  }
  if (std::optional<std::string> path = flags->Get("json")) std::ofstream(*path) << all.dump(2);
  return 0;
}

}  // namespace
}  // namespace lact

int main(int argc, char** argv) { return lact::Main(argc, argv); }
