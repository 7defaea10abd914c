// The bf16 tensor-core scan (kernels/cuda/ssd_scan_bf16.h) against the
// per-token recurrence in float64 on the same bf16 inputs: x, B and C are
// bf16 values, so the oracle sees exactly what the kernel reads, and the
// difference is the kernel's own rounding (its header lists where). The
// bounds, relative to the largest |value| of what is compared, and what the
// emulator measured over these cases:
//   y      kYBound = 1e-2     measured 2.6e-3 to 6.5e-3 (bf16 outputs: their
//                             own rounding alone is up to 2^-9 = 2.0e-3)
//   state  kStateBound = 6e-3 measured 1.6e-4 to 3.0e-3 (fp32, from the
//                             bf16-rounded B_j exp(cum_last - cum_j) dt_j)
// Shapes cover ragged chunks, one token, padding of P and N inside the
// 64 x 128 tiles, several segment counts, the state-only walk, negative
// strides, rows that are and are not 16-byte aligned, and 200K tokens with
// memories up to ~10K tokens. Inputs sit in one wider row as in the runner,
// with NaN in every padding column; y's padding must keep its sentinel.
// Runs on a GPU (label gpu) and on the CPU emulator (tools/cuda-emu, label
// emu), whose shared memory is NaN at each block's start.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan_bf16.h"

namespace lact::testing {
namespace {

using bf16 = __nv_bfloat16;

constexpr double kYBound = 1e-2;
constexpr double kStateBound = 6e-3;
constexpr double kLogDecayBound = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kSentinel = -12288.0f;  // exact in bf16

struct Shape {
  int64_t tokens;
  int heads, head_dim, d_state;
  int64_t width() const { return int64_t{heads} * head_dim; }
};

// Inputs as the runner lays them out: x, B, C at columns 0, H*P, H*P + N of
// one [T, ld] bf16 buffer; dt [T, lddt]; y [T, ldy]. Padding is NaN.
struct Inputs {
  Shape s;
  int64_t ld, lddt, ldy;
  std::vector<bf16> xbc;
  std::vector<float> dt, a_log, d_skip, state, log_decay;
};

// x, B, C uniform in [-1, 1] (rounded to bf16); dt log-uniform in [dt_lo,
// dt_hi]; A = -exp(a_log), a_log uniform in [0, log a_max]; a non-zero
// initial state. `aligned`: ld a multiple of 8 (16-byte rows), else odd.
Inputs MakeInputs(const Shape& s, uint64_t seed, double dt_lo, double dt_hi, double a_max,
                  bool aligned) {
  Random r(seed);
  auto uniform = [&r](double lo, double hi) {
    return static_cast<float>(lo + (hi - lo) * r.Uniform());
  };
  Inputs in;
  in.s = s;
  const int64_t used = s.width() + 2 * s.d_state;
  in.ld = aligned ? (used + 8) / 8 * 8 : used + (used % 2 == 0 ? 1 : 2);
  in.lddt = s.heads + 1;
  in.ldy = s.width() + 3;
  in.xbc.resize(s.tokens * in.ld);
  in.dt.resize(s.tokens * in.lddt);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t k = 0; k < in.ld; ++k)
      in.xbc[t * in.ld + k] = __float2bfloat16_rn(k < used ? uniform(-1, 1) : kNaN);
    for (int64_t h = 0; h < in.lddt; ++h) {
      in.dt[t * in.lddt + h] =
          h < s.heads ? static_cast<float>(dt_lo * std::pow(dt_hi / dt_lo, r.Uniform())) : kNaN;
    }
  }
  for (int h = 0; h < s.heads; ++h) {
    in.a_log.push_back(uniform(0, std::log(a_max)));
    in.d_skip.push_back(uniform(0.5, 1.5));
    in.log_decay.push_back(uniform(-2, 0));
  }
  in.state.resize(s.width() * s.d_state);
  for (float& v : in.state) v = uniform(-1, 1);
  return in;
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

struct Exact {
  std::vector<double> y, state, log_decay;  // y [T, ldy]
};

// The per-token recurrence in float64, each head on a thread of its own.
Exact Recurrence(const Inputs& in) {
  const Shape& s = in.s;
  Exact r{std::vector<double>(s.tokens * in.ldy), std::vector<double>(in.state.size()), {}};
  const int64_t per_head = int64_t{s.head_dim} * s.d_state;
  std::vector<std::thread> heads;
  for (int h = 0; h < s.heads; ++h) {
    r.log_decay.push_back(in.log_decay[h]);
    heads.emplace_back([&, h] {
      const double a = -std::exp(static_cast<double>(in.a_log[h]));
      double* state = r.state.data() + h * per_head;
      std::copy_n(in.state.data() + h * per_head, per_head, state);
      std::vector<double> x(s.head_dim), b(s.d_state), c(s.d_state);
      for (int64_t t = 0; t < s.tokens; ++t) {
        const bf16* row = in.xbc.data() + t * in.ld;
        for (int p = 0; p < s.head_dim; ++p) x[p] = __bfloat162float(row[h * s.head_dim + p]);
        for (int n = 0; n < s.d_state; ++n) {
          b[n] = __bfloat162float(row[s.width() + n]);
          c[n] = __bfloat162float(row[s.width() + s.d_state + n]);
        }
        const double dt = in.dt[t * in.lddt + h], decay = std::exp(dt * a);
        for (int p = 0; p < s.head_dim; ++p) {
          double* sp = state + int64_t{p} * s.d_state;
          double out = 0;
          for (int n = 0; n < s.d_state; ++n) {
            sp[n] = decay * sp[n] + dt * x[p] * b[n];
            out += sp[n] * c[n];
          }
          r.y[t * in.ldy + int64_t{h} * s.head_dim + p] = out + in.d_skip[h] * x[p];
        }
      }
    });
  }
  for (std::thread& t : heads) t.join();
  for (int h = 0; h < s.heads; ++h) {
    for (int64_t t = 0; t < s.tokens; ++t)
      r.log_decay[h] += in.dt[t * in.lddt + h] * -std::exp(static_cast<double>(in.a_log[h]));
  }
  return r;
}

struct Result {
  std::vector<float> y, state, log_decay;  // y [T, ldy], from bf16
};

template <class T>
absl::StatusOr<cuda::DeviceBuffer> Upload(cuda::CudaContext& ctx, const std::vector<T>& host) {
  const size_t bytes = host.size() * sizeof(T);
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer d, cuda::DeviceBuffer::Allocate((bytes + 3) / 4));
  if (bytes > 0) {
    LACT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d.get(), host.data(), bytes, cudaMemcpyHostToDevice, ctx.stream()));
  }
  LACT_RETURN_IF_ERROR(ctx.Synchronize());
  return d;
}

template <class T>
absl::Status Download(cuda::CudaContext& ctx, const cuda::DeviceBuffer& d, std::vector<T>& host) {
  if (host.empty()) return absl::OkStatus();
  LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), d.get(), host.size() * sizeof(T),
                                            cudaMemcpyDeviceToHost, ctx.stream()));
  return ctx.Synchronize();
}

struct RunOptions {
  bool with_y = true;
  bool reversed = false;  // walk the rows from the last, through negated strides
  int64_t segment_chunks = 0;
};

// SsdScanBf16 on `in`; y comes back in the inputs' row order.
absl::StatusOr<Result> RunScan(cuda::CudaContext& ctx, const Inputs& in, const RunOptions& o) {
  const Shape& s = in.s;
  std::vector<bf16> y16(o.with_y ? s.tokens * in.ldy : 0, __float2bfloat16_rn(kSentinel));
  Result r{{}, in.state, in.log_decay};
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer xbc, Upload(ctx, in.xbc));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer dt, Upload(ctx, in.dt));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer a_log, Upload(ctx, in.a_log));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer d_skip, Upload(ctx, in.d_skip));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer state, Upload(ctx, r.state));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer log_decay, Upload(ctx, r.log_decay));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer y, Upload(ctx, y16));
  const int64_t first = o.reversed ? s.tokens - 1 : 0;
  const cuda::MixerRows<bf16> rows{
      reinterpret_cast<const bf16*>(xbc.get()) + first * in.ld,
      in.ld,
      dt.get() + first * in.lddt,
      in.lddt,
      o.with_y ? reinterpret_cast<bf16*>(y.get()) + first * in.ldy : nullptr,
      in.ldy,
      o.reversed ? -1 : 1};
  cuda::SsdScanBf16Params p = cuda::MixerScan<cuda::SsdScanBf16Params>(
      s.tokens, s.heads, s.head_dim, s.d_state, rows, a_log.get(), d_skip.get());
  p.segment_chunks = o.segment_chunks;
  cuda::SsdWorkspace ws;
  LACT_RETURN_IF_ERROR(cuda::SsdScanBf16(ctx.stream(), ws, p, state.get(), log_decay.get()));
  LACT_RETURN_IF_ERROR(Download(ctx, y, y16));
  LACT_RETURN_IF_ERROR(Download(ctx, state, r.state));
  LACT_RETURN_IF_ERROR(Download(ctx, log_decay, r.log_decay));
  for (const bf16 v : y16) r.y.push_back(__bfloat162float(v));
  return r;
}

// max|got - want| / max|want| over [rows, cols] of row stride ld (infinite
// if got has a non-finite value).
double RelError(int64_t rows, int64_t cols, int64_t ld, const float* got, const double* want) {
  double diff = 0, scale = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const double g = got[r * ld + k], w = want[r * ld + k];
      if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
      diff = std::max(diff, std::abs(g - w));
      scale = std::max(scale, std::abs(w));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

// The errors of one run, printed (the measured figures beside the bounds)
// and checked.
void ExpectClose(const Result& got, const Exact& want, const Inputs& in, const std::string& what) {
  const Shape& s = in.s;
  const double state_error = RelError(1, want.state.size(), 0, got.state.data(), want.state.data());
  double y_error = 0;
  if (!got.y.empty()) {
    ASSERT_EQ(got.y.size(), want.y.size()) << what;
    y_error = RelError(s.tokens, s.width(), in.ldy, got.y.data(), want.y.data());
    int64_t touched = 0;
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t k = s.width(); k < in.ldy; ++k) touched += got.y[t * in.ldy + k] != kSentinel;
    }
    EXPECT_EQ(touched, 0) << what << ": y padding written";
  }
  if (got.y.empty()) {
    std::printf("%s: state %.2e\n", what.c_str(), state_error);
  } else {
    std::printf("%s: y %.2e, state %.2e\n", what.c_str(), y_error, state_error);
  }
  EXPECT_LE(y_error, kYBound) << what << " y";
  EXPECT_LE(state_error, kStateBound) << what << " state";
  for (int h = 0; h < s.heads; ++h) {
    EXPECT_NEAR(got.log_decay[h], want.log_decay[h], kLogDecayBound * std::abs(want.log_decay[h]))
        << what << " log decay, head " << h;
  }
}

class SsdBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
  }

  // The scan with outputs and the state-only walk, each against the oracle.
  void Check(const Inputs& in, RunOptions o, const std::string& what) {
    const Exact want = Recurrence(o.reversed ? Reversed(in) : in);
    Exact want_in_order = want;
    if (o.reversed) {
      for (int64_t t = 0; t < in.s.tokens; ++t) {
        std::copy_n(want.y.data() + (in.s.tokens - 1 - t) * in.ldy, in.ldy,
                    want_in_order.y.data() + t * in.ldy);
      }
    }
    absl::StatusOr<Result> got = RunScan(*ctx_, in, o);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want_in_order, in, what);
    o.with_y = false;
    got = RunScan(*ctx_, in, o);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want_in_order, in, what + ", state only");
  }

  std::unique_ptr<cuda::CudaContext> ctx_;
};

TEST_F(SsdBf16Test, FullTilesOverSegmentCounts) {
  const Inputs in = MakeInputs({600, 2, 64, 128}, 1, 0.01, 1.0, 8.0, true);
  for (int64_t segment : {0, 1, 2, 7}) {
    Check(in, {.segment_chunks = segment}, absl::StrCat("P 64, N 128, segments of ", segment));
  }
}

TEST_F(SsdBf16Test, RaggedChunksAndPaddedTiles) {
  for (const Shape& s : {Shape{1, 1, 64, 128}, Shape{63, 3, 8, 16}, Shape{65, 2, 3, 5},
                         Shape{197, 3, 40, 100}, Shape{130, 1, 64, 17}}) {
    for (bool aligned : {true, false}) {
      const Inputs in = MakeInputs(s, s.tokens + s.head_dim, 0.01, 1.0, 16.0, aligned);
      Check(in, {.segment_chunks = 2},
            absl::StrCat(s.tokens, " tokens, H ", s.heads, ", P ", s.head_dim, ", N ", s.d_state,
                         aligned ? ", aligned rows" : ", unaligned rows"));
    }
  }
}

TEST_F(SsdBf16Test, NegativeStridesScanTheRowsInReverse) {
  for (const Shape& s : {Shape{333, 2, 64, 128}, Shape{130, 3, 8, 16}}) {
    const Inputs in = MakeInputs(s, 9, 0.01, 1.0, 8.0, true);
    Check(in, {.reversed = true, .segment_chunks = 2}, absl::StrCat("reversed, ", s.tokens));
  }
}

// 200K tokens, heads whose memories range from a token to ~10K tokens, so
// that the state carried across chunks and segments matters; no D term is
// needed for that, but it stays (the oracle has it).
TEST_F(SsdBf16Test, LongSequenceMatchesTheRecurrence) {
  const Shape s{200000, 4, 8, 16};
  Inputs in = MakeInputs(s, 4, 0.5, 1.5, 4.0, true);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int h = 0; h < s.heads; ++h)
      in.dt[t * in.lddt + h] *= static_cast<float>(0.5 * std::pow(10.0, -4.0 * h / 3));
  }
  Check(in, {}, "200K tokens");
}

TEST_F(SsdBf16Test, RejectsBadArguments) {
  absl::StatusOr<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  float* any = buffer->get();
  const bf16* any16 = reinterpret_cast<const bf16*>(any);
  cuda::SsdWorkspace ws;
  auto scan = [&](int64_t tokens, int head_dim, int d_state, int64_t ldx, float* state) {
    const cuda::SsdScanBf16Params p{.tokens = tokens,
                                    .heads = 2,
                                    .head_dim = head_dim,
                                    .d_state = d_state,
                                    .x = any16,
                                    .ldx = ldx,
                                    .b = any16,
                                    .ldb = d_state,
                                    .c = any16,
                                    .ldc = d_state,
                                    .dt = any,
                                    .lddt = 2,
                                    .a_log = any,
                                    .d_skip = any,
                                    .y = reinterpret_cast<bf16*>(any),
                                    .ldy = 2 * head_dim};
    return cuda::SsdScanBf16(ctx_->stream(), ws, p, state, nullptr);
  };
  EXPECT_EQ(scan(-1, 4, 8, 8, any).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status wide = scan(10, 65, 8, 130, any);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wide.message().find("head_dim <= 64"), std::string::npos) << wide;
  const absl::Status big_state = scan(10, 4, 129, 8, any);
  EXPECT_EQ(big_state.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big_state.message().find("d_state <= 128"), std::string::npos) << big_state;
  EXPECT_EQ(scan(10, 4, 8, 7, any).code(), absl::StatusCode::kInvalidArgument);   // ldx < H*P
  EXPECT_EQ(scan(10, 4, 8, -7, any).code(), absl::StatusCode::kInvalidArgument);  // |ldx| < H*P
  EXPECT_EQ(scan(10, 4, 8, 8, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(scan(0, 4, 8, 8, any).ok());
}

}  // namespace
}  // namespace lact::testing
