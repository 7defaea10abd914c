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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/flops.h"
#include "common/flags.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/random.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/lact_ops.h"
#include "kernels/cpu/ssd_scan.h"
#include "kernels/cpu/threading.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_ops.h"
#include "worker/cpu/cpu_runner.h"
#include "worker/schedule/bimamba_schedule.h"
#include "worker/schedule/block_schedule.h"

namespace lact::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Best time of repeated runs (at least 3, at least ~0.3 s in all).
double BestSeconds(const std::function<void()>& fn) {
  fn();  // warm up
  double best = 1e30, total = 0;
  for (int i = 0; i < 3 || total < 0.3; ++i) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    if (i > 50) break;
  }
  return best;
}

std::vector<float> Normal(int64_t n, uint64_t seed, double scale = 1.0) {
  Random r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * r.Normal());
  return v;
}

// sgemm 2048^3 on the given library.
double SgemmRate(cpu::SgemmLibrary library) {
  cpu::SetSgemmLibrary(library);
  const int n = 2048;
  std::vector<float> a = Normal(n * n, 1), b = Normal(n * n, 2), c(n * n);
  const double s = BestSeconds(
      [&] { cpu::Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  cpu::SetSgemmLibrary(cpu::SgemmLibrary::kOneDnn);
  return 2.0 * n * n * n / s;
}

// The machine's own float32 rate: the faster library's.
struct Sgemm {
  double onednn = 0, openblas = 0;
  void Measure() {
    onednn = std::max(onednn, SgemmRate(cpu::SgemmLibrary::kOneDnn));
    openblas = std::max(openblas, SgemmRate(cpu::SgemmLibrary::kOpenBlas));
  }
  double Best() const { return std::max(onednn, openblas); }
};

// The same product on the CPU's bf16 matmul (bf16 operands, float32
// accumulation); 0 where there is none.
double Bf16MatmulRate() {
  if (!cpu::HasBf16Matmul()) return 0;
  const int n = 2048;
  std::vector<float> a = Normal(n * n, 1), b = Normal(n * n, 2), c(n * n);
  cpu::RoundRowsToBf16(a.data(), n, n, n);
  cpu::RoundRowsToBf16(b.data(), n, n, n);
  const double s = BestSeconds(
      [&] { cpu::MatmulBf16(false, false, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  return 2.0 * n * n * n / s;
}

// The per-token recurrence of docs/model.md, BiMamba, as one would first write it.
void NaiveScan(const cpu::ScanParams& p, float* state) {
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int h = 0; h < p.heads; ++h) {
      const float dt = p.dt[t * p.lddt + h], decay = std::exp(dt * p.a[h]);
      float* s = state + static_cast<int64_t>(h) * p.head_dim * p.d_state;
      for (int q = 0; q < p.head_dim; ++q) {
        const float x = p.x[t * p.ldx + h * p.head_dim + q];
        float y = 0;
        for (int n = 0; n < p.d_state; ++n) {
          float& sv = s[q * p.d_state + n];
          sv = decay * sv + dt * x * p.b[t * p.ldb + n];
          y += sv * p.c[t * p.ldc + n];
        }
        p.y[t * p.ldy + h * p.head_dim + q] = y + p.d_skip[h] * x;
      }
    }
  }
}

struct Row {
  std::string op;
  double seconds, flops;
  double bf16_seconds = 0;  // the op in the bf16 mode; 0: the same float32 code
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
  const std::optional<int64_t> tile_flag =
      flags->OptionalInt("tile", 1, 1 << 22).value_or(std::nullopt);
  const int64_t tile = tile_flag.value_or(DefaultCpuTileTokens("fp32"));
  const int64_t bf16_tile = tile_flag.value_or(DefaultCpuTileTokens("bf16"));
  cpu::SetNumThreads(threads);
  const ModelConfig c = *PresetConfig("small");
  const Model model = *MakePresetModel("small", 1);
  const LayerWeights& w = model.layer(0);
  const LayerFlops f = PerTokenFlops(c);
  const int64_t D = c.d_model, di = c.d_inner(), C = c.conv_channels(), R = c.in_proj_rows(),
                hs = c.ssm_heads();
  const int64_t N = c.ssm.d_state, P = c.ssm.head_dim, F = c.mlp_hidden, dh = c.ttt.head_dim,
                dhh = c.fast_hidden();

  // The machine's own rate: the best of the sgemm runs made through this
  // run (this VM's neighbours move a single one by +-20%); each op and the
  // layer are likewise their best times.
  Sgemm sgemm;
  sgemm.Measure();
  double bf16_yardstick = Bf16MatmulRate();
  // The bf16 rows below run on the bf16 matmul where there is one (whether
  // or not it is this CPU's default; see bf16_matmul.h), emulated elsewhere.
  const std::string bf16_default = CpuBf16Mode();
  const bool bf16_default_on = cpu::Bf16MatmulOn();
  cpu::SetBf16Matmul(true);
  int yardstick_runs = 1;
  std::vector<Row> rows;
  absl::StatusOr<Model> rounded = RoundGemmWeightsToBf16(model);
  if (!rounded.ok()) {
    std::fprintf(stderr, "bench_ops: %s\n", std::string(rounded.status().message()).c_str());
    return 1;
  }
  const Model& bf16_model = *rounded;
  const LayerWeights& bw = bf16_model.layer(0);
  // The linear layers' weights packed once and the bf16 rows' fast weights
  // copied to bf16 once, as the CPU backend keeps them.
  cpu::PackedWeights packed;
  cpu::Bf16Copies fast_copies;
  for (const float* fast : {bw.w0, bw.w1, bw.w2}) {
    fast_copies.Put(fast, c.ttt_heads() * c.fast_hidden() * c.ttt.head_dim);
  }
  // A GEMM op, `times` times, in float32 (the model's weights) and in the
  // bf16 mode (its rounded weights).
  // `bf16_times` (0: `times`) for an op the bf16 mode runs more often.
  const auto gemm_row = [&](const std::string& op, double flops, int times,
                            const std::function<void(cpu::Operands, const LayerWeights&)>& fn,
                            int bf16_times = 0) {
    Row r{op, times * BestSeconds([&] { fn(cpu::Operands::kFp32.With(nullptr, &packed), w); }),
          flops};
    r.bf16_seconds = (bf16_times > 0 ? bf16_times : times) *
                     BestSeconds([&] { fn(cpu::Operands::kBf16.With(&fast_copies, &packed), bw); });
    rows.push_back(r);
  };
  std::vector<float> h = Normal(T * D, 3), proj(T * R), xbc(T * C), y(T * di), out(T * D);
  std::vector<float> u = Normal(T * C, 4), dt(T * hs), a(hs), history((c.ssm.conv_width - 1) * C);
  for (float& v : dt) v = 0.01f;
  for (int64_t k = 0; k < hs; ++k) a[k] = -std::exp(w.mamba[0].a_log[k]);

  gemm_row("in_proj (x2 dirs)", f.in_proj, 2, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(h.data(), D, T, D, lw.mamba[0].in_proj, R, proj.data(), R, 0.0f, op);
  });
  rows.push_back({"conv (x2)", 2 * BestSeconds([&] {
                                 cpu::CausalConvSilu(
                                     {T, C, c.ssm.conv_width, u.data(), C, w.mamba[0].conv_w,
                                      w.mamba[0].conv_b, xbc.data(), C},
                                     history.data());
                               }),
                  f.conv});
  std::vector<float> state(hs * P * N);
  cpu::ScanParams scan{T,
                       static_cast<int>(hs),
                       static_cast<int>(P),
                       static_cast<int>(N),
                       xbc.data(),
                       C,
                       xbc.data() + di,
                       C,
                       xbc.data() + di + N,
                       C,
                       dt.data(),
                       hs,
                       a.data(),
                       w.mamba[0].d_skip,
                       y.data(),
                       di};
  const double ssd = 2 * BestSeconds([&] { cpu::SsdScan(scan, state.data(), nullptr); });
  rows.push_back({"SSD scan (x2)", ssd, f.scan});
  // The scan as the layer runs it: a tile at a time (the state carried),
  // each tile's x, B and C just written by the conv, as in the layer;
  // only the scans timed.
  double tiled_scan = 1e30;
  for (int round = 0; round < 5; ++round) {
    std::fill(state.begin(), state.end(), 0.0f);
    double total = 0;
    for (int64_t t0 = 0; t0 < T; t0 += tile) {
      const int64_t n = std::min(tile, T - t0);
      cpu::CausalConvSilu({n, C, c.ssm.conv_width, u.data() + t0 * C, C, w.mamba[0].conv_w,
                           w.mamba[0].conv_b, xbc.data() + t0 * C, C},
                          history.data());
      cpu::ScanParams part = scan;
      part.tokens = n;
      part.x += t0 * C;
      part.b += t0 * C;
      part.c += t0 * C;
      part.dt += t0 * hs;
      part.y += t0 * di;
      const auto start = Clock::now();
      cpu::SsdScan(part, state.data(), nullptr);
      total += std::chrono::duration<double>(Clock::now() - start).count();
    }
    tiled_scan = std::min(tiled_scan, total);
  }
  rows.push_back({"SSD scan (x2), tiles", 2 * tiled_scan, f.scan});
  rows.push_back({"gated norm (x2)", 2 * BestSeconds([&] {
                                       cpu::GatedRmsNormRows(y.data(), di, proj.data(), R, T, di,
                                                             w.mamba[0].norm);
                                     }),
                  f.gated_norm});
  // Its own input: the rows above normed y in place run after run, and
  // their values drift into the subnormal range, where sgemm crawls.
  const std::vector<float> mixed = Normal(T * di, 7);
  gemm_row(
      "out_proj (fp32 1x, bf16 2x)", f.out_proj, 1,
      [&](cpu::Operands op, const LayerWeights& lw) {
        cpu::Linear(mixed.data(), di, T, di, lw.out_proj, D, out.data(), D, 0.0f, op);
      },
      2);
  std::vector<float> kv(T * 2 * D), lr(T * 3 * c.ttt_heads()), q(T * D), o(T * D);
  gemm_row("qkv + lr", f.qkv_lr, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::LactKeyValueLr(c, lw, h.data(), T, kv.data(), lr.data(), op);
    cpu::LactQuery(c, lw, h.data(), T, q.data(), op);
  });
  FusedState fs = ZeroFusedState(c);
  std::vector<float> g0(fs.layers[0].w0.size()), g1(g0.size()), g2(g0.size());
  cpu::LactWorkspace ws;
  gemm_row("TTT update", f.ttt_update, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::AccumulateFastWeightGrads(c, kv.data(), lr.data(), T, {lw.w0, lw.w1, lw.w2},
                                   {g0.data(), g1.data(), g2.data()}, &ws, op);
  });
  gemm_row("TTT apply", f.ttt_apply, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::ApplyFastWeights(c, q.data(), T, {lw.w0, lw.w1, lw.w2}, o.data(), &ws, op);
  });
  gemm_row("o_proj", f.o_proj, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(o.data(), D, T, D, lw.o_proj, D, out.data(), D, 0.0f, op);
  });
  std::vector<float> gate(T * F), up(T * F);
  gemm_row("MLP", f.mlp, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(h.data(), D, T, D, lw.mlp_gate, F, gate.data(), F, 0.0f, op);
    cpu::Linear(h.data(), D, T, D, lw.mlp_up, F, up.data(), F, 0.0f, op);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * F; ++i) gate[i] = cpu::Silu(gate[i]) * up[i];
    cpu::Linear(gate.data(), F, T, F, lw.mlp_down, D, out.data(), D, 0.0f, op);
  });
  std::vector<float> muon = Normal(dhh * dh, 5);
  const double muon_s = BestSeconds([&] { cpu::NewtonSchulz(muon.data(), dhh, dh, 5); });

  // The whole layer, context mode, one worker: the schedule over the CPU
  // backend's ops (x evolves from run to run; the work does not).
  LocalCollective local;
  const ShardContext shard{.sync = &local, .total = T};
  OverlapStats overlap;
  // The same tokens for every layer's ops; one run of the layer's block.
  const auto load_tokens = [&](CpuOps& o) {
    Tensor x({T, D});
    x.data = Normal(T * D, 6);
    (void)o.LoadTokens(std::move(x));
  };
  const auto run_block = [&](const LayerWeights& lw, CpuOps& o) {
    LayerState st = fs.layers[0];
    (void)RunBlock(c, lw, shard, o, nullptr, &st);
  };
  CpuOps ops(model, c, T, tile, nullptr, &overlap);
  load_tokens(ops);
  const auto run_layer = [&] { run_block(w, ops); };
  // In alternating rounds, so that each baseline is measured beside it
  // under the same load: with more than one thread, the row slices on and
  // off (cpu::SetRowSlices; off, each GEMM threaded by its library); the
  // layer on OpenBLAS's sgemm; the bf16 mode's layer, and where the CPU
  // has a bf16 matmul, the emulation beside it (cpu::SetBf16Matmul(false)).
  const bool compare_slices = cpu::NumThreads() > 1;
  CpuOps bf16_ops(bf16_model, c, T, bf16_tile, nullptr, &overlap, cpu::Operands::kBf16);
  load_tokens(bf16_ops);
  const auto run_bf16_layer = [&] { run_block(bw, bf16_ops); };
  const bool compare_emulation = cpu::HasBf16Matmul();
  double layer = 1e30, layer_unsliced = 1e30, layer_bf16 = 1e30, layer_emulated = 1e30;
  double layer_openblas = 1e30;
  for (int round = 0; round < 3; ++round) {
    layer = std::min(layer, BestSeconds(run_layer));
    cpu::SetSgemmLibrary(cpu::SgemmLibrary::kOpenBlas);
    layer_openblas = std::min(layer_openblas, BestSeconds(run_layer));
    cpu::SetSgemmLibrary(cpu::SgemmLibrary::kOneDnn);
    if (compare_slices) {
      cpu::SetRowSlices(false);
      layer_unsliced = std::min(layer_unsliced, BestSeconds(run_layer));
      cpu::SetRowSlices(true);
    }
    layer_bf16 = std::min(layer_bf16, BestSeconds(run_bf16_layer));
    if (compare_emulation) {
      cpu::SetBf16Matmul(false);
      layer_emulated = std::min(layer_emulated, BestSeconds(run_bf16_layer));
      cpu::SetBf16Matmul(true);
    }
    sgemm.Measure();
    bf16_yardstick = std::max(bf16_yardstick, Bf16MatmulRate());
    ++yardstick_runs;
  }

  // The same layer in the bf16 mode: rounded weights, operands rounded as
  // they are made, the GEMMs on the bf16 matmul (or emulated; cpu_runner.h).

  // The layer's BiMamba half on its own, to see what the op rows leave out.
  (void)ops.BeginBlock(w);
  const double bimamba = BestSeconds([&] {
    LayerState st = fs.layers[0];
    (void)RunBiMamba(c, w, shard, ops, nullptr, &st);
  });
  std::printf("(BiMamba half of the layer: %.2f ms)\n", 1e3 * bimamba);

  std::vector<float> naive_state(hs * P * N);
  const double naive = 2 * BestSeconds([&] { NaiveScan(scan, naive_state.data()); });

  const double yardstick = sgemm.Best();
  nlohmann::json json;
  json["threads"] = cpu::NumThreads();
  json["tokens"] = T;
  json["tile"] = tile;
  json["bf16_tile"] = bf16_tile;
  json["sgemm_gflops"] = yardstick / 1e9;
  json["sgemm_runs"] = yardstick_runs;
  json["sgemm_onednn_gflops"] = sgemm.onednn / 1e9;
  json["sgemm_openblas_gflops"] = sgemm.openblas / 1e9;
  json["bf16_matmul_gflops"] = bf16_yardstick / 1e9;
  json["bf16_matmul_kernel"] = cpu::Bf16MatmulKernel();
  std::printf(
      "preset:small, %lld tokens (layer tiles of %lld, bf16 %lld), %d threads; yardsticks 2048^3 "
      "(best of %d "
      "runs): sgemm %.1f "
      "GFLOP/s (oneDNN %.1f, OpenBLAS %.1f), bf16 matmul %.1f GFLOP/s (%s)\n",
      static_cast<long long>(T), static_cast<long long>(tile), static_cast<long long>(bf16_tile),
      cpu::NumThreads(), yardstick_runs, yardstick / 1e9, sgemm.onednn / 1e9, sgemm.openblas / 1e9,
      bf16_yardstick / 1e9, cpu::Bf16MatmulKernel().c_str());
  // A fraction of the bf16 matmul rate, or "-" where there is none.
  const auto of_bf16 = [&](double rate) {
    char text[16] = "-";
    if (bf16_yardstick > 0) std::snprintf(text, sizeof text, "%.1f%%", 100 * rate / bf16_yardstick);
    return std::string(text);
  };
  std::printf("%-22s %10s %14s %12s %12s %12s %12s\n", "op", "ms", "model GFLOP/s", "of sgemm",
              "bf16 ms", "bf16 GFLOP/s", "of bf16 mm");
  for (const Row& r : rows) {
    const double rate = r.flops * T / r.seconds;
    nlohmann::json row = {{"op", r.op},
                          {"ms", 1e3 * r.seconds},
                          {"gflops", rate / 1e9},
                          {"of_sgemm", rate / yardstick}};
    if (r.bf16_seconds > 0) {
      const double bf16_rate = r.flops * T / r.bf16_seconds;
      std::printf("%-22s %10.2f %14.1f %11.1f%% %12.2f %12.1f %12s\n", r.op.c_str(),
                  1e3 * r.seconds, rate / 1e9, 100 * rate / yardstick, 1e3 * r.bf16_seconds,
                  bf16_rate / 1e9, of_bf16(bf16_rate).c_str());
      row["bf16_ms"] = 1e3 * r.bf16_seconds;
      row["bf16_gflops"] = bf16_rate / 1e9;
      row["bf16_of_sgemm"] = bf16_rate / yardstick;
      if (bf16_yardstick > 0) row["bf16_of_bf16_matmul"] = bf16_rate / bf16_yardstick;
    } else {
      std::printf("%-22s %10.2f %14.1f %11.1f%% %12s\n", r.op.c_str(), 1e3 * r.seconds, rate / 1e9,
                  100 * rate / yardstick, "(same)");
    }
    json["ops"].push_back(row);
  }
  const double muon_rate = 3 * NewtonSchulzFlops(dh, dhh, 5) / (3 * muon_s);
  std::printf("%-22s %10.3f %14.1f %11.1f%%   (per [%lld x %lld] matrix, 5 steps)\n", "Muon",
              1e3 * muon_s, muon_rate / 1e9, 100 * muon_rate / yardstick,
              static_cast<long long>(dhh), static_cast<long long>(dh));
  json["ops"].push_back({{"op", "Muon"},
                         {"ms", 1e3 * muon_s},
                         {"gflops", muon_rate / 1e9},
                         {"of_sgemm", muon_rate / yardstick}});
  const double layer_rate = f.total() * T / layer;
  std::printf("%-22s %10.2f %14.1f %11.1f%%   (%.0f tokens/s per layer)\n", "whole layer",
              1e3 * layer, layer_rate / 1e9, 100 * layer_rate / yardstick, T / layer);
  json["layer"] = {{"ms", 1e3 * layer},
                   {"gflops", layer_rate / 1e9},
                   {"of_sgemm", layer_rate / yardstick},
                   {"tokens_per_s", T / layer}};
  // A baseline's row: its time, rate and share of sgemm, and `ratio` (its
  // time over the layer's it is compared with) as `key` and in `note`.
  const auto baseline_row = [&](const char* name, double seconds, const char* note, const char* key,
                                double ratio) {
    const double rate = f.total() * T / seconds;
    char text[160];
    std::snprintf(text, sizeof text, note, ratio);
    std::printf("%-22s %10.2f %14.1f %11.1f%%   (%s)\n", name, 1e3 * seconds, rate / 1e9,
                100 * rate / yardstick, text);
    return nlohmann::json{{"ms", 1e3 * seconds},
                          {"gflops", rate / 1e9},
                          {"of_sgemm", rate / yardstick},
                          {key, ratio}};
  };
  json["layer_openblas"] = baseline_row("whole layer, OpenBLAS", layer_openblas,
                                        "OpenBLAS sgemm: oneDNN's runs the layer %.2fx faster",
                                        "onednn_speedup", layer_openblas / layer);
  if (compare_slices) {
    json["layer_unsliced"] = baseline_row("whole layer, unsliced", layer_unsliced,
                                          "row slices off: the slices run %.2fx faster",
                                          "slices_speedup", layer_unsliced / layer);
  }
  const double bf16_rate = f.total() * T / layer_bf16;
  std::printf(
      "%-22s %10.2f %14.1f %11.1f%%   (%s of the bf16 matmul; %.2fx the fp32 layer's "
      "time; %s)\n",
      "whole layer, bf16", 1e3 * layer_bf16, bf16_rate / 1e9, 100 * bf16_rate / yardstick,
      of_bf16(bf16_rate).c_str(), layer_bf16 / layer, CpuBf16Mode().c_str());
  std::printf("(this CPU's default bf16 mode: %s)\n", bf16_default.c_str());
  json["layer_bf16"] = {{"ms", 1e3 * layer_bf16},
                        {"gflops", bf16_rate / 1e9},
                        {"of_sgemm", bf16_rate / yardstick},
                        {"vs_fp32_layer_time", layer_bf16 / layer},
                        {"mode", CpuBf16Mode()},
                        {"default_mode", bf16_default}};
  if (bf16_yardstick > 0) json["layer_bf16"]["of_bf16_matmul"] = bf16_rate / bf16_yardstick;
  if (compare_emulation) {
    json["layer_bf16_emulated"] =
        baseline_row("whole layer, bf16 emul.", layer_emulated,
                     "bf16 emulated in sgemm: the bf16 matmul runs at %.2fx its speed",
                     "matmul_speedup", layer_emulated / layer_bf16);
  }
  cpu::SetBf16Matmul(bf16_default_on);
  std::printf(
      "scan, both directions: SSD chunked %.2f ms vs per-token recurrence %.2f ms (%.1fx)\n",
      1e3 * ssd, 1e3 * naive, naive / ssd);
  json["scan"] = {{"ssd_ms", 1e3 * ssd}, {"naive_ms", 1e3 * naive}, {"speedup", naive / ssd}};
  if (std::optional<std::string> path = flags->Get("json"))
    std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace lact::bench

int main(int argc, char** argv) { return lact::bench::Main(argc, argv); }
