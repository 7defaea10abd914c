// The chunked CUDA scan (kernels/cuda/ssd_scan.h) beside the CPU one
// (kernels/cpu/ssd_scan.h, itself tested against the float64 reference) on
// random inputs over a sweep of shapes, and beside the per-token recurrence
// in float64 on a long sequence (200K tokens), every result within 1e-4
// (max|got - want| / max|want|). Inputs are laid out as in the runner (x, B
// and C column slices of one wider row) with NaN in every padding column, and
// y's padding columns must keep their sentinel. Skipped where no CUDA device
// is visible; ctest label `gpu`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "kernels/cpu/ssd_scan.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/ssd_scan.h"

namespace lact::testing {
namespace {

constexpr double kTolerance = 1e-4;
constexpr float kSentinel = -12345.0f;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// max|got - want| / max|want| over a [rows, cols] block (absolute when want
// is all zeros); infinity when got has a non-finite value. `want` is float,
// or float64 for an exact oracle.
template <typename Want>
double RelError(int64_t rows, int64_t cols, const float* got, int64_t ldg, const Want* want,
                int64_t ldw) {
  double diff = 0, scale = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const double g = got[r * ldg + k], w = want[r * ldw + k];
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      diff = std::max(diff, std::abs(g - w));
      scale = std::max(scale, std::abs(w));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  return RelError(1, static_cast<int64_t>(want.size()), got.data(), 0, want.data(), 0);
}

struct Shape {
  int64_t tokens;
  int heads, head_dim, d_state;
  int64_t width() const { return int64_t{heads} * head_dim; }
};

// A scan's inputs as the runner lays them out: x, B, C at columns 0, H*P and
// H*P + N of one [T, ld] buffer; dt [T, lddt]; y [T, ldy]. Padding is NaN.
struct Inputs {
  Shape s;
  int64_t ld, lddt, ldy;
  std::vector<float> xbc, dt, a_log, a, d_skip, state, log_decay;
  bool skip = true;  // false: no D term (d_skip passed as null)
};

// dt log-uniform in [dt_lo, dt_hi] (softplus outputs), A = -exp(a_log) with
// a_log uniform in [0, log a_max], a non-zero initial state and log decay.
Inputs MakeInputs(const Shape& s, uint64_t seed, double dt_lo, double dt_hi, double a_max) {
  Random r(seed);
  auto uniform = [&r](double lo, double hi) {
    return static_cast<float>(lo + (hi - lo) * r.Uniform());
  };
  Inputs in;
  in.s = s;
  in.ld = s.width() + 2 * s.d_state + 1;
  in.lddt = s.heads + 1;
  in.ldy = s.width() + 3;
  in.xbc.resize(s.tokens * in.ld);
  in.dt.resize(s.tokens * in.lddt);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t k = 0; k < in.ld; ++k)
      in.xbc[t * in.ld + k] = k + 1 < in.ld ? uniform(-1, 1) : kNaN;
    for (int64_t h = 0; h < in.lddt; ++h) {
      in.dt[t * in.lddt + h] =
          h < s.heads ? static_cast<float>(dt_lo * std::pow(dt_hi / dt_lo, r.Uniform())) : kNaN;
    }
  }
  for (int h = 0; h < s.heads; ++h) {
    in.a_log.push_back(uniform(0, std::log(a_max)));
    in.a.push_back(-std::exp(in.a_log.back()));
    in.d_skip.push_back(uniform(0.5, 1.5));
    in.log_decay.push_back(uniform(-2, 0));
  }
  in.state.resize(s.width() * s.d_state);
  for (float& v : in.state) v = uniform(-1, 1);
  return in;
}

struct Result {
  std::vector<float> y, state, log_decay;
};

// The CPU scan: full (y [T, ldy], padding left at the sentinel) or state only.
Result RunCpu(const Inputs& in, bool with_y) {
  const Shape& s = in.s;
  Result r{std::vector<float>(with_y ? s.tokens * in.ldy : 0, kSentinel), in.state, in.log_decay};
  const float* x = in.xbc.data();
  const cpu::ScanParams p{s.tokens,
                          s.heads,
                          s.head_dim,
                          s.d_state,
                          x,
                          in.ld,
                          x + s.width(),
                          in.ld,
                          x + s.width() + s.d_state,
                          in.ld,
                          in.dt.data(),
                          in.lddt,
                          in.a.data(),
                          in.skip ? in.d_skip.data() : nullptr,
                          r.y.data(),
                          in.ldy};
  if (with_y) {
    cpu::SsdScan(p, r.state.data(), r.log_decay.data());
  } else {
    cpu::SsdScanStateOnly(p, r.state.data(), r.log_decay.data());
  }
  return r;
}

// The same inputs with their rows (tokens) in reverse order.
Inputs Reversed(const Inputs& in) {
  Inputs r = in;
  const int64_t T = in.s.tokens;
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(in.xbc.data() + (T - 1 - t) * in.ld, in.ld, r.xbc.data() + t * in.ld);
    std::copy_n(in.dt.data() + (T - 1 - t) * in.lddt, in.lddt, r.dt.data() + t * in.lddt);
  }
  return r;
}

// cuda::SsdScan on the same inputs; with_log_decay false passes null for it
// (the result's log_decay then keeps its initial value). `reversed` scans
// the rows from the last, through negated row strides, as the backward
// direction does; y comes back in the inputs' row order.
absl::StatusOr<Result> RunGpu(cuda::CudaContext& ctx, const Inputs& in, bool with_y,
                              cuda::SsdWorkspace& ws, bool with_log_decay = true,
                              bool reversed = false) {
  const Shape& s = in.s;
  Result r{std::vector<float>(with_y ? s.tokens * in.ldy : 0, kSentinel), in.state, in.log_decay};
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer xbc, ctx.Upload(in.xbc.data(), in.xbc.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer dt, ctx.Upload(in.dt.data(), in.dt.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer a_log, ctx.Upload(in.a_log.data(), in.a_log.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer d_skip, ctx.Upload(in.d_skip.data(), in.d_skip.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer state, ctx.Upload(r.state.data(), r.state.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer log_decay,
                        ctx.Upload(r.log_decay.data(), r.log_decay.size()));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer y, ctx.Upload(r.y.data(), r.y.size()));
  const int64_t first = reversed ? s.tokens - 1 : 0;
  const cuda::MixerRows<float> rows{xbc.get() + first * in.ld,
                                    in.ld,
                                    dt.get() + first * in.lddt,
                                    in.lddt,
                                    with_y ? y.get() + first * in.ldy : nullptr,
                                    in.ldy,
                                    reversed ? -1 : 1};
  const cuda::SsdScanParams params =
      cuda::MixerScan<cuda::SsdScanParams>(s.tokens, s.heads, s.head_dim, s.d_state, rows,
                                           a_log.get(), in.skip ? d_skip.get() : nullptr);
  LACT_RETURN_IF_ERROR(cuda::SsdScan(ctx.stream(), ws, params, state.get(),
                                     with_log_decay ? log_decay.get() : nullptr));
  LACT_RETURN_IF_ERROR(ctx.Download(y.get(), r.y.size(), r.y.data()));
  LACT_RETURN_IF_ERROR(ctx.Download(state.get(), r.state.size(), r.state.data()));
  LACT_RETURN_IF_ERROR(ctx.Download(log_decay.get(), r.log_decay.size(), r.log_decay.data()));
  return r;
}

// The scan's per-token recurrence in float64 (the oracle of the long
// test): y [T, ldy] and the final state, each head on a thread of its own.
struct ExactResult {
  std::vector<double> y, state;
};

ExactResult RecurrenceF64(const Inputs& in) {
  const Shape& s = in.s;
  ExactResult r{std::vector<double>(s.tokens * in.ldy), std::vector<double>(in.state.size())};
  const int64_t per_head = int64_t{s.head_dim} * s.d_state;
  std::vector<std::thread> heads;
  for (int h = 0; h < s.heads; ++h) {
    heads.emplace_back([&, h] {
      const double a = -std::exp(static_cast<double>(in.a_log[h]));
      const double skip = in.skip ? in.d_skip[h] : 0.0;
      double* state = r.state.data() + h * per_head;
      std::copy_n(in.state.data() + h * per_head, per_head, state);
      for (int64_t t = 0; t < s.tokens; ++t) {
        const float* row = in.xbc.data() + t * in.ld;
        const float *x = row + int64_t{h} * s.head_dim, *b = row + s.width(), *c = b + s.d_state;
        const double dt = in.dt[t * in.lddt + h], decay = std::exp(dt * a);
        for (int p = 0; p < s.head_dim; ++p) {
          double* sp = state + int64_t{p} * s.d_state;
          double out = 0;
          for (int n = 0; n < s.d_state; ++n) {
            sp[n] = decay * sp[n] + dt * x[p] * b[n];
            out += sp[n] * c[n];
          }
          r.y[t * in.ldy + int64_t{h} * s.head_dim + p] = out + skip * x[p];
        }
      }
    });
  }
  for (std::thread& t : heads) t.join();
  return r;
}

// got within kTolerance of want: y's [T, H*P] (its padding columns still the
// sentinel), the state and the log decay.
void ExpectClose(const Result& got, const Result& want, const Inputs& in, const std::string& what) {
  const Shape& s = in.s;
  if (!want.y.empty()) {
    ASSERT_EQ(got.y.size(), want.y.size()) << what;
    EXPECT_LE(RelError(s.tokens, s.width(), got.y.data(), in.ldy, want.y.data(), in.ldy),
              kTolerance)
        << what << " y";
    int64_t touched = 0;
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t k = s.width(); k < in.ldy; ++k) touched += got.y[t * in.ldy + k] != kSentinel;
    }
    EXPECT_EQ(touched, 0) << what << ": y padding written";
  }
  EXPECT_LE(RelError(got.state, want.state), kTolerance) << what << " state";
  EXPECT_LE(RelError(got.log_decay, want.log_decay), kTolerance) << what << " log_decay";
}

class SsdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda::DeviceCount() == 0) return;
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
    if (ctx.ok()) {
      ctx_ = std::move(*ctx);
    } else {
      ctx_error_ = ctx.status().ToString();
    }
  }
  static void TearDownTestSuite() { ctx_.reset(); }

  static std::unique_ptr<cuda::CudaContext> ctx_;
  static std::string ctx_error_;
};

std::unique_ptr<cuda::CudaContext> SsdTest::ctx_;
std::string SsdTest::ctx_error_;

using SweepParam = std::tuple<int64_t, int, int, int>;  // tokens, head_dim, d_state, heads

class SsdSweepTest : public SsdTest, public ::testing::WithParamInterface<SweepParam> {};

TEST_P(SsdSweepTest, MatchesCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  const auto [tokens, head_dim, d_state, heads] = GetParam();
  const uint64_t seed = tokens * 1000003 + head_dim * 1009 + d_state * 31 + heads;
  const Inputs in = MakeInputs({tokens, heads, head_dim, d_state}, seed, 0.01, 1.0, 16.0);
  const Result want = RunCpu(in, true);
  for (int64_t window : {0, 1, 3}) {  // automatic, and windows that cut the sequence
    cuda::SsdWorkspace ws(window);
    absl::StatusOr<Result> got = RunGpu(*ctx_, in, true, ws);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want, in, absl::StrCat("window ", window));
  }
  cuda::SsdWorkspace ws;
  absl::StatusOr<Result> got = RunGpu(*ctx_, in, false, ws);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, RunCpu(in, false), in, "state only");
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [tokens, head_dim, d_state, heads] = info.param;
  return absl::StrCat("T", tokens, "_P", head_dim, "_N", d_state, "_H", heads);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SsdSweepTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, 63, 64, 65, 197, 1000),
                                            ::testing::Values(1, 3, 8, 64),
                                            ::testing::Values(1, 5, 16, 128),
                                            ::testing::Values(1, 3, 4)),
                         SweepName);

TEST_F(SsdTest, ZeroTokensIsANoOp) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  const Inputs in = MakeInputs({0, 3, 8, 16}, 1, 0.01, 1.0, 16.0);
  for (bool with_y : {true, false}) {
    cuda::SsdWorkspace ws;
    absl::StatusOr<Result> got = RunGpu(*ctx_, in, with_y, ws);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->state, in.state);
    EXPECT_EQ(got->log_decay, in.log_decay);
  }
}

TEST_F(SsdTest, WithoutSkipTermOrLogDecay) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  Inputs in = MakeInputs({130, 2, 8, 16}, 2, 0.01, 1.0, 16.0);
  in.skip = false;
  Result want = RunCpu(in, true);
  want.log_decay = in.log_decay;  // not passed to the GPU
  cuda::SsdWorkspace ws;
  absl::StatusOr<Result> got = RunGpu(*ctx_, in, true, ws, /*with_log_decay=*/false);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, want, in, "no skip, no log decay");
  Result want_state = RunCpu(in, false);
  want_state.log_decay = in.log_decay;
  got = RunGpu(*ctx_, in, false, ws, /*with_log_decay=*/false);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, want_state, in, "state only, no log decay");
}

TEST_F(SsdTest, NegativeStridesScanTheRowsInReverse) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  for (const Shape& s : {Shape{130, 2, 8, 16}, Shape{333, 3, 64, 8}}) {
    const Inputs in = MakeInputs(s, 9, 0.01, 1.0, 8.0);
    Result want = RunCpu(Reversed(in), true);
    const std::vector<float> scan_order = want.y;
    for (int64_t t = 0; t < s.tokens; ++t) {
      std::copy_n(scan_order.data() + (s.tokens - 1 - t) * in.ldy, in.ldy,
                  want.y.data() + t * in.ldy);
    }
    cuda::SsdWorkspace ws(2);  // several windows
    absl::StatusOr<Result> got = RunGpu(*ctx_, in, true, ws, true, /*reversed=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want, in, absl::StrCat("reversed, ", s.tokens, " tokens"));
    got = RunGpu(*ctx_, in, false, ws, true, /*reversed=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, RunCpu(Reversed(in), false), in, "reversed, state only");
  }
}

// The products on the tensor cores (3xTF32) keep the fp32 kernel's bound:
// a ragged chunk, N = 128, P over one 64-wide tile, several windows, the
// state-only pass and the reversed walk.
TEST_F(SsdTest, TensorCoresMatchTheCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  for (const Shape& s : {Shape{130, 2, 8, 16}, Shape{200, 3, 64, 128}, Shape{333, 2, 72, 8}}) {
    const Inputs in = MakeInputs(s, 11, 0.01, 1.0, 8.0);
    cuda::SsdWorkspace ws(2, cuda::SsdMath::kTf32x3);
    const std::string what = absl::StrCat("tf32x3, ", s.tokens, " tokens, P ", s.head_dim);
    absl::StatusOr<Result> got = RunGpu(*ctx_, in, true, ws);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, RunCpu(in, true), in, what);
    got = RunGpu(*ctx_, in, false, ws);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, RunCpu(in, false), in, what + ", state only");
  }
}

TEST_F(SsdTest, RejectsBadArguments) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  cuda::SsdWorkspace ws;
  absl::StatusOr<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(1024);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  float* any = buffer->get();
  auto scan = [&](int64_t tokens, int heads, int64_t ldx, float* state) {
    const cuda::SsdScanParams p{.tokens = tokens,
                                .heads = heads,
                                .head_dim = 4,
                                .d_state = 8,
                                .x = any,
                                .ldx = ldx,
                                .b = any,
                                .ldb = 8,
                                .c = any,
                                .ldc = 8,
                                .dt = any,
                                .lddt = heads,
                                .a_log = any,
                                .d_skip = any,
                                .y = any,
                                .ldy = heads * 4};
    return cuda::SsdScan(ctx_->stream(), ws, p, state, nullptr);
  };
  EXPECT_EQ(scan(-1, 2, 8, any).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scan(10, 0, 8, any).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scan(10, 2, 7, any).code(), absl::StatusCode::kInvalidArgument);   // ldx < H*P
  EXPECT_EQ(scan(10, 2, -7, any).code(), absl::StatusCode::kInvalidArgument);  // |ldx| < H*P
  EXPECT_EQ(scan(10, 2, 8, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// Slow decays (memories of hundreds to thousands of tokens) over many
// chunks: the state-only pass then combines segments of several chunks.
TEST_F(SsdTest, StateOnlyOverManySegments) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  const Inputs in = MakeInputs({300000, 2, 8, 16}, 3, 1e-4, 1e-3, 2.0);
  cuda::SsdWorkspace ws;
  absl::StatusOr<Result> got = RunGpu(*ctx_, in, false, ws);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, RunCpu(in, false), in, "state only");
  got = RunGpu(*ctx_, in, true, ws);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*got, RunCpu(in, true), in, "with outputs");
}

// 200k tokens, heads whose memories range from a token to ~10k tokens, so
// that the state carried across chunks and windows (~14k tokens here)
// matters, against the per-token recurrence on the GPU, head by head (no D
// term, so y is the state's contribution alone).
TEST_F(SsdTest, LongSequenceMatchesRecurrence) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_NE(ctx_, nullptr) << ctx_error_;
  const Shape s{200000, 8, 64, 64};
  Inputs in = MakeInputs(s, 4, 0.5, 1.5, 4.0);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int h = 0; h < s.heads; ++h)
      in.dt[t * in.lddt + h] *= static_cast<float>(0.5 * std::pow(10.0, -4.0 * h / 7));
  }
  for (float& d : in.d_skip) d = 0.0f;
  cuda::SsdWorkspace ws;
  absl::StatusOr<Result> ssd = RunGpu(*ctx_, in, true, ws);
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  absl::StatusOr<Result> summary = RunGpu(*ctx_, in, false, ws);
  ASSERT_TRUE(summary.ok()) << summary.status();

  const ExactResult exact = RecurrenceF64(in);

  // The per-token fp32 recurrence's own error, for the record: over 200K
  // tokens its sequential rounding is no oracle.
  cuda::CudaContext& ctx = *ctx_;
  absl::StatusOr<cuda::DeviceBuffer> xbc = ctx.Upload(in.xbc.data(), in.xbc.size());
  absl::StatusOr<cuda::DeviceBuffer> dt = ctx.Upload(in.dt.data(), in.dt.size());
  absl::StatusOr<cuda::DeviceBuffer> a_log = ctx.Upload(in.a_log.data(), in.a_log.size());
  absl::StatusOr<cuda::DeviceBuffer> d_skip = ctx.Upload(in.d_skip.data(), in.d_skip.size());
  absl::StatusOr<cuda::DeviceBuffer> state = ctx.Upload(in.state.data(), in.state.size());
  absl::StatusOr<cuda::DeviceBuffer> y = cuda::DeviceBuffer::Allocate(s.tokens * in.ldy);
  for (const auto* b : {&xbc, &dt, &a_log, &d_skip, &state, &y})
    ASSERT_TRUE(b->ok()) << b->status();
  const float* x = xbc->get();
  ASSERT_TRUE(cuda::ScanRecurrence(ctx.stream(), s.tokens, s.heads, s.head_dim, s.d_state, x, in.ld,
                                   x + s.width(), in.ld, x + s.width() + s.d_state, in.ld,
                                   dt->get(), in.lddt, a_log->get(), d_skip->get(), y->get(),
                                   in.ldy, state->get())
                  .ok());
  std::vector<float> fp32_y(s.tokens * in.ldy), fp32_state(in.state.size());
  ASSERT_TRUE(ctx.Download(y->get(), fp32_y.size(), fp32_y.data()).ok());
  ASSERT_TRUE(ctx.Download(state->get(), fp32_state.size(), fp32_state.data()).ok());

  const int64_t per_head = int64_t{s.head_dim} * s.d_state;
  for (int h = 0; h < s.heads; ++h) {
    const int64_t col = int64_t{h} * s.head_dim;
    const double* exact_state = exact.state.data() + h * per_head;
    const double ssd_y =
        RelError(s.tokens, s.head_dim, ssd->y.data() + col, in.ldy, exact.y.data() + col, in.ldy);
    const double ssd_state =
        RelError(1, per_head, ssd->state.data() + h * per_head, 0, exact_state, 0);
    std::printf(
        "head %d: SSD y %.2e state %.2e; fp32 recurrence y %.2e state %.2e\n", h, ssd_y, ssd_state,
        RelError(s.tokens, s.head_dim, fp32_y.data() + col, in.ldy, exact.y.data() + col, in.ldy),
        RelError(1, per_head, fp32_state.data() + h * per_head, 0, exact_state, 0));
    EXPECT_LE(ssd_y, kTolerance) << "y, head " << h;
    EXPECT_LE(ssd_state, kTolerance) << "state, head " << h;
    EXPECT_LE(RelError(1, per_head, summary->state.data() + h * per_head, 0, exact_state, 0),
              kTolerance)
        << "state-only state, head " << h;
    double log_decay = in.log_decay[h];
    for (int64_t t = 0; t < s.tokens; ++t)
      log_decay += static_cast<double>(in.dt[t * in.lddt + h]) * in.a[h];
    EXPECT_NEAR(ssd->log_decay[h], log_decay, kTolerance * std::abs(log_decay)) << "head " << h;
    EXPECT_NEAR(summary->log_decay[h], log_decay, kTolerance * std::abs(log_decay)) << "head " << h;
  }
}

}  // namespace
}  // namespace lact::testing
