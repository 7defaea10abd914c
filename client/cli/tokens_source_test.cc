// random:L tokens: standard normal (moments, the normal CDF everywhere to
// within a Kolmogorov-Smirnov distance, no correlation between neighbours
// or between a pair's two values), bounded as the header says, the same
// for a seed whatever the thread count, different for another seed.
#include "client/cli/tokens_source.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lact::cli {
namespace {

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(RandomNormalTokens, AreStandardNormal) {
  const Tensor t = RandomNormalTokens(4096, 257, 3);  // ragged: a partial last block
  const std::vector<float>& v = t.data;
  const double n = static_cast<double>(v.size());
  double mean = 0, m2 = 0, m3 = 0, m4 = 0, lag = 0, peak = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    mean += x;
    m2 += x * x;
    m3 += x * x * x;
    m4 += x * x * x * x;
    if (i > 0) lag += x * v[i - 1];
    peak = std::max(peak, std::abs(x));
  }
  mean /= n;
  m2 /= n;
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(m2, 1.0, 0.005);
  EXPECT_NEAR(m3 / n, 0.0, 0.01);
  EXPECT_NEAR(m4 / n, 3.0, 0.03);
  EXPECT_NEAR(lag / n, 0.0, 0.005) << "neighbouring values correlate";
  EXPECT_LE(peak, 5.78) << "24-bit uniforms bound the radius at sqrt(2 ln 2^24)";
  EXPECT_GT(peak, 4.0) << "the tails are missing";

  // A pair's cosine and sine lie half a block apart (1 << 15 values).
  double pair = 0;
  const size_t half = size_t{1} << 15;
  for (size_t i = 0; i < half; ++i) pair += static_cast<double>(v[i]) * v[i + half];
  EXPECT_NEAR(pair / half, 0.0, 0.02) << "a pair's two values correlate";

  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  double ks = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const double cdf = NormalCdf(sorted[i]);
    ks = std::max({ks, std::abs(cdf - i / n), std::abs(cdf - (i + 1) / n)});
  }
  EXPECT_LT(ks, 0.002) << "Kolmogorov-Smirnov distance to the normal CDF";
}

TEST(RandomNormalTokens, DependOnTheSeedOnly) {
  omp_set_num_threads(1);
  const Tensor one = RandomNormalTokens(1000, 300, 9);
  omp_set_num_threads(3);
  const Tensor three = RandomNormalTokens(1000, 300, 9);
  omp_set_num_threads(2);
  EXPECT_EQ(one.data, three.data);
  const Tensor other = RandomNormalTokens(1000, 300, 10);
  size_t same = 0;
  for (size_t i = 0; i < other.data.size(); ++i) same += other.data[i] == one.data[i];
  EXPECT_LT(same, other.data.size() / 1000);
}

}  // namespace
}  // namespace lact::cli
