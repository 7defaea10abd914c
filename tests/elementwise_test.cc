// The CPU kernels' branch-free activations (kernels/cpu/elementwise.h)
// against float64 libm on a dense grid, as scalars and lane by lane as
// vectors (simd.h): FastExp within 2e-7 relative on [-87, 88] and clamped
// past it; Softplus within 3e-7 relative on [-80, 80], x itself far out
// on the right and e^x far out on the left.
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

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

TEST(ElementwiseTest, FastExpWithin2e7OfLibmAndClamped) {
  const Results r = Evaluate(-87.0, 175.0 / 160000, 160000, [](float x) { return FastExp(x); },
                             [](Vec x) { return FastExp(x); });
  double worst = 0;
  for (size_t i = 0; i < r.x.size(); ++i) {
    const double want = std::exp(r.x[i]);
    worst = std::max({worst, RelativeError(r.scalar[i], want), RelativeError(r.vector[i], want)});
  }
  EXPECT_LT(worst, 2e-7);
  // Past the range: the ends' values, finite, never inf or 0.
  EXPECT_FLOAT_EQ(FastExp(1000.0f), FastExp(88.3762626647949f));
  EXPECT_FLOAT_EQ(FastExp(-1000.0f), FastExp(-87.3365447505531f));
  EXPECT_TRUE(std::isfinite(FastExp(1000.0f)));
  EXPECT_GT(FastExp(-1000.0f), 0.0f);
}

TEST(ElementwiseTest, SoftplusWithin3e7OfLibm) {
  const Results r = Evaluate(-80.0, 160.0 / 160000, 160000, [](float x) { return Softplus(x); },
                             [](Vec x) { return SoftplusOf(x); });
  double worst = 0;
  for (size_t i = 0; i < r.x.size(); ++i) {
    const double want = std::log1p(std::exp(r.x[i]));
    worst = std::max({worst, RelativeError(r.scalar[i], want), RelativeError(r.vector[i], want)});
  }
  EXPECT_LT(worst, 3e-7);
}

TEST(ElementwiseTest, SoftplusFarOut) {
  for (float x : {30.0f, 100.0f, 1e6f, 3e38f}) EXPECT_EQ(Softplus(x), x) << x;
  for (float x : {-30.0f, -60.0f, -85.0f})
    EXPECT_NEAR(Softplus(x), std::exp(double{x}), 3e-7 * std::exp(double{x})) << x;
  EXPECT_GE(Softplus(-1e6f), 0.0f);
  EXPECT_EQ(Softplus(0.0f), static_cast<float>(std::log(2.0)));
}

}  // namespace
}  // namespace lact::cpu
