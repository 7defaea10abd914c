// The CPU kernels' branch-free activations (kernels/cpu/elementwise.h)
// against float64 libm on a dense grid, as scalars and lane by lane as
// vectors (simd.h): FastExp within 2e-7 relative on [-87, 88] and clamped
// past it; Softplus within 3e-7 relative on [-80, 80], x itself far out
// on the right and e^x far out on the left; SiLU and the sigmoid within
// 3e-7; a vector written as bf16 bit for bit as each lane alone; the
// vector loops' tails.
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/simd.h"

namespace lact::cpu {
namespace {

// Every grid point x_i = lo + i * step with i < count, a vector's worth at
// a time, and each lane's result beside the scalar call's.
struct Results {
  std::vector<double> x;
  std::vector<float> scalar, vector;
};

Results Evaluate(double lo, double step, int count, const std::function<float(float)>& scalar,
                 const std::function<Vec(Vec)>& vector) {
  Results r;
  for (int i = 0; i < count; i += kLanes) {
    Vec in;
    for (int l = 0; l < kLanes; ++l) in[l] = static_cast<float>(lo + (i + l) * step);
    const Vec out = vector(in);
    for (int l = 0; l < kLanes; ++l) {
      r.x.push_back(in[l]);
      r.scalar.push_back(scalar(in[l]));
      r.vector.push_back(out[l]);
    }
  }
  return r;
}

double RelativeError(float got, double want) { return std::abs(got - want) / std::abs(want); }

// The worst relative error of the scalar and the vector results against
// want(x) (float64), over the points where want(x) is not 0.
double WorstError(const Results& r, const std::function<double(double)>& want) {
  double worst = 0;
  for (size_t i = 0; i < r.x.size(); ++i) {
    const double w = want(r.x[i]);
    if (w == 0) continue;
    worst = std::max({worst, RelativeError(r.scalar[i], w), RelativeError(r.vector[i], w)});
  }
  return worst;
}

TEST(ElementwiseTest, FastExpWithin2e7OfLibmAndClamped) {
  const Results r = Evaluate(
      -87.0, 175.0 / 160000, 160000, [](float x) { return FastExp(x); },
      [](Vec x) { return FastExp(x); });
  EXPECT_LT(WorstError(r, [](double x) { return std::exp(x); }), 2e-7);
  // Past the range: the ends' values, finite, never inf or 0.
  EXPECT_FLOAT_EQ(FastExp(1000.0f), FastExp(88.3762626647949f));
  EXPECT_FLOAT_EQ(FastExp(-1000.0f), FastExp(-87.3365447505531f));
  EXPECT_TRUE(std::isfinite(FastExp(1000.0f)));
  EXPECT_GT(FastExp(-1000.0f), 0.0f);
}

TEST(ElementwiseTest, SoftplusWithin3e7OfLibm) {
  const Results r = Evaluate(
      -80.0, 160.0 / 160000, 160000, [](float x) { return Softplus(x); },
      [](Vec x) { return SoftplusOf(x); });
  EXPECT_LT(WorstError(r, [](double x) { return std::log1p(std::exp(x)); }), 3e-7);
}

TEST(ElementwiseTest, SoftplusFarOut) {
  for (float x : {30.0f, 100.0f, 1e6f, 3e38f}) EXPECT_EQ(Softplus(x), x) << x;
  for (float x : {-30.0f, -60.0f, -85.0f})
    EXPECT_NEAR(Softplus(x), std::exp(double{x}), 3e-7 * std::exp(double{x})) << x;
  EXPECT_GE(Softplus(-1e6f), 0.0f);
  EXPECT_EQ(Softplus(0.0f), static_cast<float>(std::log(2.0)));
}

TEST(ElementwiseTest, SiluAndSigmoidWithin3e7OfLibm) {
  const Results silu = Evaluate(
      -80.0, 160.0 / 160000, 160000, [](float x) { return Silu(x); },
      [](Vec x) { return SiluOf(x); });
  const Results sigmoid = Evaluate(
      -80.0, 160.0 / 160000, 160000, [](float x) { return Sigmoid(x); },
      [](Vec x) { return SigmoidOf(x); });
  const auto sigmoid_of = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  EXPECT_LT(WorstError(silu, [&](double x) { return x * sigmoid_of(x); }), 3e-7);
  EXPECT_LT(WorstError(sigmoid, sigmoid_of), 3e-7);
  EXPECT_EQ(Silu(0.0f), 0.0f);
}

TEST(ElementwiseTest, VectorWrittenAsBf16AsEachLane) {
  // Ties both ways, values near the largest finite bf16, subnormals, zeros.
  const std::vector<float> values = {
      1.0f,     1.00390625f, 1.01171875f, -2.5e-3f, 3.3895e38f, -1.7e-39f,  0.0f, -0.0f,
      65537.5f, 1e-30f,      3.14159f,    -7.0e5f,  0.333333f,  1.0039063f, 2.0f, -1.5f};
  for (size_t first = 0; first + kLanes <= values.size(); first += kLanes) {
    const Vec v = Load(values.data() + first);
    uint16_t bits[kLanes];
    Put(v, bits);
    for (int l = 0; l < kLanes; ++l) {
      EXPECT_EQ(bits[l], FloatToBFloat16(values[first + l])) << values[first + l];
    }
  }
}

TEST(ElementwiseTest, VectorLoopsCoverEveryIndexOnce) {
  for (int64_t n : {0, 1, kLanes - 1, kLanes, kLanes + 1, 5 * kLanes + 3}) {
    std::vector<int> seen(n, 0), seen_parallel(n, 0);
    ForEachVector(n, [&](int64_t i, auto like) {
      const int width = std::is_same_v<decltype(like), Vec> ? kLanes : 1;
      for (int l = 0; l < width; ++l) ++seen[i + l];
    });
    ParallelForEachVector(n, [&](int64_t i, auto like) {
      const int width = std::is_same_v<decltype(like), Vec> ? kLanes : 1;
      for (int l = 0; l < width; ++l) ++seen_parallel[i + l];
    });
    EXPECT_EQ(seen, std::vector<int>(n, 1)) << n;
    EXPECT_EQ(seen_parallel, std::vector<int>(n, 1)) << n;
  }
}

}  // namespace
}  // namespace lact::cpu
