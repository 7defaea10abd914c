// random:L tokens: standard normal (moments, the normal CDF everywhere to
// within a Kolmogorov-Smirnov distance, no correlation between neighbours
// or between a pair's two values), bounded as the header says, the same
// for a seed whatever the thread count, another stream for another seed
// (not a shifted copy), a shorter context a prefix of a longer one.
#include "client/cli/tokens_source.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
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

  // A pair's cosine and sine are neighbours, at 2i and 2i + 1.
  double pair = 0;
  const size_t pairs = v.size() / 2;
  for (size_t i = 0; i < pairs; ++i) pair += static_cast<double>(v[2 * i]) * v[2 * i + 1];
  EXPECT_NEAR(pair / pairs, 0.0, 0.005) << "a pair's two values correlate";

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
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor one = RandomNormalTokens(1000, 300, 9);
  omp_set_num_threads(3);
  const Tensor three = RandomNormalTokens(1000, 300, 9);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.data, three.data);
  // Another seed is another stream, not this one shifted.
  const Tensor other = RandomNormalTokens(1000, 300, 10);
  for (int shift = 0; shift <= 4; ++shift) {
    size_t same = 0;
    for (size_t i = 0; i + shift < other.data.size(); ++i)
      same += other.data[i] == one.data[i + shift] || one.data[i] == other.data[i + shift];
    EXPECT_LT(same, other.data.size() / 1000) << "seeds 9 and 10 agree at shift " << shift;
  }
}

// A shorter context is a prefix of a longer one, ragged and odd totals too
// (3 x 5 values; 65,537 = a block and one value).
TEST(RandomNormalTokens, ShorterIsAPrefix) {
  const Tensor longer = RandomNormalTokens(70000, 3, 4);
  for (const auto& [tokens, width] :
       std::vector<std::pair<int64_t, int64_t>>{{5, 3}, {1, 3}, {21845, 3}, {21846, 3}}) {
    const Tensor shorter = RandomNormalTokens(tokens, width, 4);
    ASSERT_EQ(shorter.size(), tokens * width);
    for (int64_t i = 0; i < shorter.size(); ++i) {
      ASSERT_EQ(shorter.data[i], longer.data[i]) << tokens << " x " << width << " at " << i;
      ASSERT_TRUE(std::isfinite(shorter.data[i]));
    }
  }
}

TEST(RandomNormalValues, AreTheTokensFromAnyStart) {
  // 3 blocks and a ragged end; ranges that start and end inside blocks,
  // on their edges, at odd places, and the whole.
  const int64_t rows = 800, width = 257, total = rows * width;
  const Tensor t = RandomNormalTokens(rows, width, 11);
  for (const auto [first, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 10},
                                                                        {1, 1},
                                                                        {65530, 15},
                                                                        {65536, 65536},
                                                                        {131071, 3},
                                                                        {7, 200000},
                                                                        {0, total},
                                                                        {total - 5, 5}}) {
    std::vector<float> got(n);
    RandomNormalValues(11, first, n, got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), t.data.begin() + first))
        << "values [" << first << ", " << first + n << ")";
  }
}

TEST(RandomContextSource, ReadsTheRowsLoadTokensMakes) {
  absl::StatusOr<std::optional<ContextSource>> source = RandomContextSource("random:700:4", 96);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(source->has_value());
  EXPECT_EQ((*source)->tokens, 700);
  EXPECT_EQ((*source)->width, 96);
  absl::StatusOr<Tensor> whole = LoadTokens("random:700:4", 96);
  ASSERT_TRUE(whole.ok());
  std::vector<float> rows(333 * 96);
  ASSERT_TRUE((*source)->read(350, 333, rows.data()).ok());
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), whole->ptr() + 350 * 96));
  EXPECT_FALSE(RandomContextSource("tokens.npy", 96)->has_value()) << "files are read whole";
  EXPECT_EQ(RandomContextSource("random:0", 96).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lact::cli
