// Per-op and per-layer CPU throughput of preset:small as model FLOP/s
// (bench/flops.h) and as a fraction of this machine's own sgemm rate at the
// same thread count, measured in this one run; in the bf16 mode, the GEMM
// ops and the layer also as a fraction of the same run's bf16 matmul rate
// (where the CPU has one), and the layer beside its emulation. The SSD
// scan twice: on the whole segment in one call, and a layer tile at a
// time right after each tile's conv, as the layer runs it. Also the
// selective scan against a straightforward per-token recurrence over the
// same data.
//   bench_ops [--threads N] [--tokens T] [--tile N] [--json FILE]
// --tile: the layer rows' and the tiled scan's tile in both precisions
// (default the CPU runner's for each, DefaultCpuTileTokens).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench/ops_bench.h"
#include "common/flags.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/threading.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_runner.h"

namespace lact::bench {
namespace {

// What bench_ops prints and writes, with the rates it divides by.
class Report {
 public:
  explicit Report(const OpsBench& b) : b_(b), T_(b.tokens()), yardstick_(b.sgemm().Best()) {}

  void Header() {
    const Sgemm& s = b_.sgemm();
    json_["threads"] = cpu::NumThreads();
    json_["tokens"] = T_;
    json_["tile"] = b_.tile();
    json_["bf16_tile"] = b_.bf16_tile();
    json_["sgemm_gflops"] = yardstick_ / 1e9;
    json_["sgemm_runs"] = b_.yardstick_runs();
    json_["sgemm_onednn_gflops"] = s.onednn / 1e9;
    json_["sgemm_openblas_gflops"] = s.openblas / 1e9;
    json_["bf16_matmul_gflops"] = b_.bf16_yardstick() / 1e9;
    json_["bf16_matmul_kernel"] = cpu::Bf16MatmulKernel();
    std::printf(
        "preset:small, %lld tokens (layer tiles of %lld, bf16 %lld), %d threads; yardsticks "
        "2048^3 (best of %d runs): sgemm %.1f GFLOP/s (oneDNN %.1f, OpenBLAS %.1f), bf16 matmul "
        "%.1f GFLOP/s (%s)\n",
        static_cast<long long>(T_), static_cast<long long>(b_.tile()),
        static_cast<long long>(b_.bf16_tile()), cpu::NumThreads(), b_.yardstick_runs(),
        yardstick_ / 1e9, s.onednn / 1e9, s.openblas / 1e9, b_.bf16_yardstick() / 1e9,
        cpu::Bf16MatmulKernel().c_str());
  }

  void Ops(double muon_seconds) {
    std::printf("%-22s %10s %14s %12s %12s %12s %12s\n", "op", "ms", "model GFLOP/s", "of sgemm",
                "bf16 ms", "bf16 GFLOP/s", "of bf16 mm");
    for (const Row& r : b_.rows()) json_["ops"].push_back(OpRow(r));
    const ModelConfig& c = b_.config();
    const double rate =
        3 * NewtonSchulzFlops(c.ttt.head_dim, c.fast_hidden(), 5) / (3 * muon_seconds);
    std::printf("%-22s %10.3f %14.1f %11.1f%%   (per [%lld x %lld] matrix, 5 steps)\n", "Muon",
                1e3 * muon_seconds, rate / 1e9, 100 * rate / yardstick_,
                static_cast<long long>(c.fast_hidden()), static_cast<long long>(c.ttt.head_dim));
    json_["ops"].push_back({{"op", "Muon"},
                            {"ms", 1e3 * muon_seconds},
                            {"gflops", rate / 1e9},
                            {"of_sgemm", rate / yardstick_}});
  }

  void Layer(const LayerTimes& t, const std::string& bf16_default) {
    const double rate = LayerRate(t.layer);
    std::printf("%-22s %10.2f %14.1f %11.1f%%   (%.0f tokens/s per layer)\n", "whole layer",
                1e3 * t.layer, rate / 1e9, 100 * rate / yardstick_, T_ / t.layer);
    json_["layer"] = {{"ms", 1e3 * t.layer},
                      {"gflops", rate / 1e9},
                      {"of_sgemm", rate / yardstick_},
                      {"tokens_per_s", T_ / t.layer}};
    json_["layer_openblas"] = Baseline("whole layer, OpenBLAS", t.openblas,
                                       "OpenBLAS sgemm: oneDNN's runs the layer %.2fx faster",
                                       "onednn_speedup", t.openblas / t.layer);
    if (t.compared_slices) {
      json_["layer_unsliced"] = Baseline("whole layer, unsliced", t.unsliced,
                                         "row slices off: the slices run %.2fx faster",
                                         "slices_speedup", t.unsliced / t.layer);
    }
    Bf16Layer(t, bf16_default);
  }

  void Scan(double naive) {
    const double ssd = b_.ssd_seconds();
    std::printf(
        "scan, both directions: SSD chunked %.2f ms vs per-token recurrence %.2f ms (%.1fx)\n",
        1e3 * ssd, 1e3 * naive, naive / ssd);
    json_["scan"] = {{"ssd_ms", 1e3 * ssd}, {"naive_ms", 1e3 * naive}, {"speedup", naive / ssd}};
  }

  const nlohmann::json& json() const { return json_; }

 private:
  double LayerRate(double seconds) const { return b_.flops().total() * T_ / seconds; }

  // A fraction of the bf16 matmul rate, or "-" where there is none.
  std::string OfBf16(double rate) const {
    char text[16] = "-";
    if (b_.bf16_yardstick() > 0)
      std::snprintf(text, sizeof text, "%.1f%%", 100 * rate / b_.bf16_yardstick());
    return text;
  }

  nlohmann::json OpRow(const Row& r) const {
    const double rate = r.flops * T_ / r.seconds;
    nlohmann::json row = {{"op", r.op},
                          {"ms", 1e3 * r.seconds},
                          {"gflops", rate / 1e9},
                          {"of_sgemm", rate / yardstick_}};
    if (r.bf16_seconds <= 0) {
      std::printf("%-22s %10.2f %14.1f %11.1f%% %12s\n", r.op.c_str(), 1e3 * r.seconds, rate / 1e9,
                  100 * rate / yardstick_, "(same)");
      return row;
    }
    const double bf16_rate = r.flops * T_ / r.bf16_seconds;
    std::printf("%-22s %10.2f %14.1f %11.1f%% %12.2f %12.1f %12s\n", r.op.c_str(), 1e3 * r.seconds,
                rate / 1e9, 100 * rate / yardstick_, 1e3 * r.bf16_seconds, bf16_rate / 1e9,
                OfBf16(bf16_rate).c_str());
    row["bf16_ms"] = 1e3 * r.bf16_seconds;
    row["bf16_gflops"] = bf16_rate / 1e9;
    row["bf16_of_sgemm"] = bf16_rate / yardstick_;
    if (b_.bf16_yardstick() > 0) row["bf16_of_bf16_matmul"] = bf16_rate / b_.bf16_yardstick();
    return row;
  }

  // A baseline's row: its time, rate and share of sgemm, and `ratio` (its
  // time over the layer's it is compared with) as `key` and in `note`.
  nlohmann::json Baseline(const char* name, double seconds, const char* note, const char* key,
                          double ratio) const {
    const double rate = LayerRate(seconds);
    char text[160];
    std::snprintf(text, sizeof text, note, ratio);
    std::printf("%-22s %10.2f %14.1f %11.1f%%   (%s)\n", name, 1e3 * seconds, rate / 1e9,
                100 * rate / yardstick_, text);
    return {{"ms", 1e3 * seconds},
            {"gflops", rate / 1e9},
            {"of_sgemm", rate / yardstick_},
            {key, ratio}};
  }

  void Bf16Layer(const LayerTimes& t, const std::string& bf16_default) {
    const double rate = LayerRate(t.bf16);
    std::printf(
        "%-22s %10.2f %14.1f %11.1f%%   (%s of the bf16 matmul; %.2fx the fp32 layer's time; "
        "%s)\n",
        "whole layer, bf16", 1e3 * t.bf16, rate / 1e9, 100 * rate / yardstick_,
        OfBf16(rate).c_str(), t.bf16 / t.layer, CpuBf16Mode().c_str());
    std::printf("(this CPU's default bf16 mode: %s)\n", bf16_default.c_str());
    json_["layer_bf16"] = {{"ms", 1e3 * t.bf16},
                           {"gflops", rate / 1e9},
                           {"of_sgemm", rate / yardstick_},
                           {"vs_fp32_layer_time", t.bf16 / t.layer},
                           {"mode", CpuBf16Mode()},
                           {"default_mode", bf16_default}};
    if (b_.bf16_yardstick() > 0) json_["layer_bf16"]["of_bf16_matmul"] = rate / b_.bf16_yardstick();
    if (t.compared_emulation) {
      json_["layer_bf16_emulated"] =
          Baseline("whole layer, bf16 emul.", t.emulated,
                   "bf16 emulated in sgemm: the bf16 matmul runs at %.2fx its speed",
                   "matmul_speedup", t.emulated / t.bf16);
    }
  }

  const OpsBench& b_;
  const int64_t T_;
  const double yardstick_;
  nlohmann::json json_;
};

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                                             {"threads", "tokens", "tile", "json"});
  if (!flags.ok()) {
    std::fprintf(stderr, "bench_ops: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const int threads = static_cast<int>(flags->Int("threads", 0, 0, 1024).value_or(0));
  const int64_t T = flags->Int("tokens", 16384, 64, 1 << 22).value_or(16384);
  const std::optional<int64_t> tile = flags->OptionalInt("tile", 1, 1 << 22).value_or(std::nullopt);
  cpu::SetNumThreads(threads);
  // The CPU's default bf16 mode, before the bench turns the bf16 matmul on.
  const std::string bf16_default = CpuBf16Mode();
  const bool bf16_default_on = cpu::Bf16MatmulOn();
  absl::StatusOr<std::unique_ptr<OpsBench>> bench = OpsBench::Create(
      T, tile.value_or(DefaultCpuTileTokens("fp32")), tile.value_or(DefaultCpuTileTokens("bf16")));
  if (!bench.ok()) {
    std::fprintf(stderr, "bench_ops: %s\n", std::string(bench.status().message()).c_str());
    return 1;
  }
  OpsBench& b = **bench;
  b.MeasureMixerOps();
  b.MeasureLactOps();
  const double muon = b.MuonSeconds();
  const LayerTimes layer = b.MeasureLayer();
  std::printf("(BiMamba half of the layer: %.2f ms)\n", 1e3 * layer.bimamba);
  const double naive = b.NaiveScanSeconds();
  Report report(b);
  report.Header();
  report.Ops(muon);
  report.Layer(layer, bf16_default);
  cpu::SetBf16Matmul(bf16_default_on);
  report.Scan(naive);
  if (std::optional<std::string> path = flags->Get("json"))
    std::ofstream(*path) << report.json().dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace lact::bench

int main(int argc, char** argv) { return lact::bench::Main(argc, argv); }
