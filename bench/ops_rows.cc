#include <chrono>
#include <cmath>

#include "bench/ops_bench.h"
#include "common/fused_state.h"
#include "common/random.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/lact_layer.h"
#include "kernels/cpu/newton_schulz.h"
#include "kernels/cpu/threading.h"
#include "worker/cpu/cpu_ops.h"
#include "worker/cpu/cpu_runner.h"
#include "worker/schedule/bimamba_schedule.h"
#include "worker/schedule/block_schedule.h"

namespace lact::bench {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

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

void Sgemm::Measure() {
  onednn = std::max(onednn, SgemmRate(cpu::SgemmLibrary::kOneDnn));
  openblas = std::max(openblas, SgemmRate(cpu::SgemmLibrary::kOpenBlas));
}

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

absl::StatusOr<std::unique_ptr<OpsBench>> OpsBench::Create(int64_t tokens, int64_t tile,
                                                           int64_t bf16_tile) {
  Model model = *MakePresetModel("small", 1);
  absl::StatusOr<Model> rounded = RoundGemmWeightsToBf16(model);
  if (!rounded.ok()) return rounded.status();
  return std::unique_ptr<OpsBench>(
      new OpsBench(tokens, tile, bf16_tile, std::move(model), *std::move(rounded)));
}

OpsBench::OpsBench(int64_t tokens, int64_t tile, int64_t bf16_tile, Model model, Model bf16_model)
    : T_(tokens),
      tile_(tile),
      bf16_tile_(bf16_tile),
      c_(*PresetConfig("small")),
      model_(std::move(model)),
      bf16_model_(std::move(bf16_model)),
      f_(PerTokenFlops(c_)) {
  // The machine's own rate: the best of the sgemm runs made through this
  // run; each op and the layer are likewise their best times.
  sgemm_.Measure();
  bf16_yardstick_ = Bf16MatmulRate();
  // The bf16 rows run on the bf16 matmul where there is one (whether or
  // not it is this CPU's default; see bf16_matmul.h), emulated elsewhere.
  cpu::SetBf16Matmul(true);
  const LayerWeights& bw = bf16_model_.layer(0);
  for (const float* fast : {bw.w0, bw.w1, bw.w2})
    fast_copies_.Put(fast, c_.ttt_heads() * c_.fast_hidden() * c_.ttt.head_dim);
  const int64_t T = T_, D = c_.d_model, di = c_.d_inner(), C = c_.conv_channels(),
                R = c_.in_proj_rows(), hs = c_.ssm_heads();
  h_ = Normal(T * D, 3);
  proj_.resize(T * R);
  xbc_.resize(T * C);
  y_.resize(T * di);
  out_.resize(T * D);
  u_ = Normal(T * C, 4);
  dt_.assign(T * hs, 0.01f);
  a_.resize(hs);
  history_.resize((c_.ssm.conv_width - 1) * C);
  state_.resize(hs * c_.ssm.head_dim * c_.ssm.d_state);
  const LayerWeights& w = model_.layer(0);
  for (int64_t k = 0; k < hs; ++k) a_[k] = -std::exp(w.mamba[0].a_log[k]);
  scan_ = {T,
           static_cast<int>(hs),
           static_cast<int>(c_.ssm.head_dim),
           static_cast<int>(c_.ssm.d_state),
           xbc_.data(),
           C,
           xbc_.data() + di,
           C,
           xbc_.data() + di + c_.ssm.d_state,
           C,
           dt_.data(),
           hs,
           a_.data(),
           w.mamba[0].d_skip,
           y_.data(),
           di};
}

void OpsBench::GemmRow(const std::string& op, double flops, int times,
                       const std::function<void(cpu::Operands, const LayerWeights&)>& fn,
                       int bf16_times) {
  const LayerWeights& w = model_.layer(0);
  const LayerWeights& bw = bf16_model_.layer(0);
  Row r{op, times * BestSeconds([&] { fn(cpu::Operands::kFp32.With(nullptr, &packed_), w); }),
        flops};
  r.bf16_seconds = (bf16_times > 0 ? bf16_times : times) *
                   BestSeconds([&] { fn(cpu::Operands::kBf16.With(&fast_copies_, &packed_), bw); });
  rows_.push_back(r);
}

void OpsBench::MeasureMixerOps() {
  const LayerWeights& w = model_.layer(0);
  const int64_t T = T_, D = c_.d_model, di = c_.d_inner(), C = c_.conv_channels(),
                R = c_.in_proj_rows();
  GemmRow("in_proj (x2 dirs)", f_.in_proj, 2, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(h_.data(), D, T, D, lw.mamba[0].in_proj, R, proj_.data(), R, 0.0f, op);
  });
  rows_.push_back({"conv (x2)", 2 * BestSeconds([&] {
                                  cpu::CausalConvSilu(
                                      {T, C, c_.ssm.conv_width, u_.data(), C, w.mamba[0].conv_w,
                                       w.mamba[0].conv_b, xbc_.data(), C},
                                      history_.data());
                                }),
                   f_.conv});
  ssd_ = 2 * BestSeconds([&] { cpu::SsdScan(scan_, state_.data(), nullptr); });
  rows_.push_back({"SSD scan (x2)", ssd_, f_.scan});
  rows_.push_back({"SSD scan (x2), tiles", 2 * TiledScanSeconds(), f_.scan});
  rows_.push_back({"gated norm (x2)", 2 * BestSeconds([&] {
                                        cpu::GatedRmsNormRows(y_.data(), di, proj_.data(), R, T, di,
                                                              w.mamba[0].norm);
                                      }),
                   f_.gated_norm});
  // Its own input: the rows above normed y in place run after run, and
  // their values drift into the subnormal range, where sgemm crawls.
  const std::vector<float> mixed = Normal(T * di, 7);
  GemmRow(
      "out_proj (fp32 1x, bf16 2x)", f_.out_proj, 1,
      [&](cpu::Operands op, const LayerWeights& lw) {
        cpu::Linear(mixed.data(), di, T, di, lw.out_proj, D, out_.data(), D, 0.0f, op);
      },
      2);
}

// The scan as the layer runs it: a tile at a time (the state carried),
// each tile's x, B and C just written by the conv, as in the layer; only
// the scans timed.
double OpsBench::TiledScanSeconds() {
  const LayerWeights& w = model_.layer(0);
  const int64_t C = c_.conv_channels(), hs = c_.ssm_heads(), di = c_.d_inner();
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    std::fill(state_.begin(), state_.end(), 0.0f);
    double total = 0;
    for (int64_t t0 = 0; t0 < T_; t0 += tile_) {
      const int64_t n = std::min(tile_, T_ - t0);
      cpu::CausalConvSilu({n, C, c_.ssm.conv_width, u_.data() + t0 * C, C, w.mamba[0].conv_w,
                           w.mamba[0].conv_b, xbc_.data() + t0 * C, C},
                          history_.data());
      cpu::ScanParams part = scan_;
      part.tokens = n;
      part.x += t0 * C;
      part.b += t0 * C;
      part.c += t0 * C;
      part.dt += t0 * hs;
      part.y += t0 * di;
      const auto start = Clock::now();
      cpu::SsdScan(part, state_.data(), nullptr);
      total += std::chrono::duration<double>(Clock::now() - start).count();
    }
    best = std::min(best, total);
  }
  return best;
}

void OpsBench::MeasureLactOps() {
  const int64_t T = T_, D = c_.d_model, F = c_.mlp_hidden;
  std::vector<float> kv(T * 2 * D), lr(T * 3 * c_.ttt_heads()), q(T * D), o(T * D);
  GemmRow("qkv + lr", f_.qkv_lr, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::LactKeyValueLr(c_, lw, h_.data(), T, kv.data(), lr.data(), op);
    cpu::LactQuery(c_, lw, h_.data(), T, q.data(), op);
  });
  const FusedState fs = ZeroFusedState(c_);
  std::vector<float> g0(fs.layers[0].w0.size()), g1(g0.size()), g2(g0.size());
  cpu::LactWorkspace ws;
  GemmRow("TTT update", f_.ttt_update, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::AccumulateFastWeightGrads(c_, kv.data(), lr.data(), T, {lw.w0, lw.w1, lw.w2},
                                   {g0.data(), g1.data(), g2.data()}, &ws, op);
  });
  GemmRow("TTT apply", f_.ttt_apply, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::ApplyFastWeights(c_, q.data(), T, {lw.w0, lw.w1, lw.w2}, o.data(), &ws, op);
  });
  GemmRow("o_proj", f_.o_proj, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(o.data(), D, T, D, lw.o_proj, D, out_.data(), D, 0.0f, op);
  });
  std::vector<float> gate(T * F), up(T * F);
  GemmRow("MLP", f_.mlp, 1, [&](cpu::Operands op, const LayerWeights& lw) {
    cpu::Linear(h_.data(), D, T, D, lw.mlp_gate, F, gate.data(), F, 0.0f, op);
    cpu::Linear(h_.data(), D, T, D, lw.mlp_up, F, up.data(), F, 0.0f, op);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * F; ++i) gate[i] = cpu::Silu(gate[i]) * up[i];
    cpu::Linear(gate.data(), F, T, F, lw.mlp_down, D, out_.data(), D, 0.0f, op);
  });
}

double OpsBench::MuonSeconds() {
  std::vector<float> muon = Normal(c_.fast_hidden() * c_.ttt.head_dim, 5);
  return BestSeconds([&] { cpu::NewtonSchulz(muon.data(), c_.fast_hidden(), c_.ttt.head_dim, 5); });
}

double OpsBench::NaiveScanSeconds() {
  std::vector<float> naive_state(state_.size());
  return 2 * BestSeconds([&] { NaiveScan(scan_, naive_state.data()); });
}

// The whole layer, context mode, one worker: the schedule over the CPU
// backend's ops (x evolves from run to run; the work does not). In
// alternating rounds, so that each baseline is measured beside it under
// the same load: with more than one thread, the row slices on and off
// (cpu::SetRowSlices; off, each GEMM threaded by its library); the layer
// on OpenBLAS's sgemm; the bf16 mode's layer (rounded weights, operands
// rounded as they are made), and where the CPU has a bf16 matmul, the
// emulation beside it (cpu::SetBf16Matmul(false)).
LayerTimes OpsBench::MeasureLayer() {
  LocalCollective local;
  const ShardContext shard{.sync = &local, .total = T_};
  OverlapStats overlap;
  const FusedState fs = ZeroFusedState(c_);
  const auto load_tokens = [&](CpuOps& o) {
    Tensor x({T_, c_.d_model});
    x.data = Normal(T_ * c_.d_model, 6);
    (void)o.LoadTokens(std::move(x));
  };
  const auto run_block = [&](const LayerWeights& lw, CpuOps& o) {
    LayerState st = fs.layers[0];
    (void)RunBlock(c_, lw, shard, o, nullptr, &st);
  };
  CpuOps ops(model_, c_, T_, tile_, nullptr, &overlap);
  load_tokens(ops);
  CpuOps bf16_ops(bf16_model_, c_, T_, bf16_tile_, nullptr, &overlap, cpu::Operands::kBf16);
  load_tokens(bf16_ops);
  const auto run_layer = [&] { run_block(model_.layer(0), ops); };
  const auto run_bf16_layer = [&] { run_block(bf16_model_.layer(0), bf16_ops); };
  LayerTimes t{.compared_slices = cpu::NumThreads() > 1,
               .compared_emulation = cpu::HasBf16Matmul()};
  for (int round = 0; round < 3; ++round) {
    t.layer = std::min(t.layer, BestSeconds(run_layer));
    cpu::SetSgemmLibrary(cpu::SgemmLibrary::kOpenBlas);
    t.openblas = std::min(t.openblas, BestSeconds(run_layer));
    cpu::SetSgemmLibrary(cpu::SgemmLibrary::kOneDnn);
    if (t.compared_slices) {
      cpu::SetRowSlices(false);
      t.unsliced = std::min(t.unsliced, BestSeconds(run_layer));
      cpu::SetRowSlices(true);
    }
    t.bf16 = std::min(t.bf16, BestSeconds(run_bf16_layer));
    if (t.compared_emulation) {
      cpu::SetBf16Matmul(false);
      t.emulated = std::min(t.emulated, BestSeconds(run_bf16_layer));
      cpu::SetBf16Matmul(true);
    }
    sgemm_.Measure();
    bf16_yardstick_ = std::max(bf16_yardstick_, Bf16MatmulRate());
    ++yardstick_runs_;
  }
  // The layer's BiMamba half on its own, to see what the op rows leave out.
  (void)ops.BeginBlock(model_.layer(0));
  t.bimamba = BestSeconds([&] {
    LayerState st = fs.layers[0];
    (void)RunBiMamba(c_, model_.layer(0), shard, ops, nullptr, &st);
  });
  return t;
}

}  // namespace lact::bench
