// The SSD scan's register-blocked products (kernels/cpu/small_gemm.h)
// against float64 sums: row-major and transposed A, a lower-triangular A,
// row scales, beta 0 (C unread: it starts as NaN) and 1, sizes
// that fill no register block and no vector, strides wider than the rows,
// and zero depth.
#include "kernels/cpu/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/random.h"

namespace lact::cpu {
namespace {

struct Case {
  int64_t rows, cols, depth;
  bool transposed_a;
  bool lower;
  bool scales;
  float beta;
};

std::string Name(const Case& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "x" + std::to_string(c.depth) +
         (c.transposed_a ? " At" : " A") + (c.lower ? " lower" : "") + (c.scales ? " scaled" : "") +
         " beta=" + std::to_string(c.beta);
}

std::vector<float> Normal(int64_t n, uint64_t seed) {
  Random random(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(random.Normal());
  return x;
}

void Check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(Name(c));
  const int64_t pad = 3;
  // A(i, k) is a[i * a_row + k * a_col]; stored transposed it is [depth, rows].
  const int64_t lda = (c.transposed_a ? c.rows : c.depth) + pad;
  const int64_t a_row = c.transposed_a ? 1 : lda, a_col = c.transposed_a ? lda : 1;
  const int64_t ldb = c.cols + pad, ldc = c.cols + pad;
  std::vector<float> a = Normal((c.transposed_a ? c.depth : c.rows) * lda, seed);
  if (c.lower) {
    for (int64_t i = 0; i < c.rows; ++i)
      for (int64_t k = i + 1; k < c.depth; ++k) a[i * a_row + k * a_col] = 0.0f;
  }
  const std::vector<float> b = Normal(c.depth * ldb, seed + 1);
  const std::vector<float> row_scale = Normal(c.rows, seed + 2);
  std::vector<float> out =
      c.beta == 0.0f ? std::vector<float>(c.rows * ldc, std::numeric_limits<float>::quiet_NaN())
                     : Normal(c.rows * ldc, seed + 4);
  const std::vector<float> before = out;
  SmallGemm(c.rows, c.cols, c.depth, a.data(), a_row, a_col, b.data(), ldb, c.beta, out.data(), ldc,
            c.lower, c.scales ? row_scale.data() : nullptr);
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < c.depth; ++k) {
        const double term = static_cast<double>(a[i * a_row + k * a_col]) * b[k * ldb + j];
        sum += term;
        magnitude += std::fabs(term);
      }
      const double scale = c.scales ? row_scale[i] : 1.0;
      const double prior = c.beta == 0.0f ? 0.0 : c.beta * before[i * ldc + j];
      const double expected = scale * sum + prior;
      const double bound = 1e-6 * (std::fabs(scale) * magnitude + std::fabs(prior)) + 1e-30;
      ASSERT_NEAR(out[i * ldc + j], expected, bound) << "at (" << i << ", " << j << ")";
    }
    // The padding past each row of C is not written.
    for (int64_t j = c.cols; j < ldc; ++j) {
      const float was = before[i * ldc + j], now = out[i * ldc + j];
      ASSERT_TRUE(std::isnan(was) ? std::isnan(now) : was == now)
          << "padding at (" << i << ", " << j << ")";
    }
  }
}

TEST(SmallGemmTest, MatchesFloat64SumsOnEveryPathAndShape) {
  uint64_t seed = 11;
  // Rows that fill 0-2 register blocks (of 8 rows with AVX-512, 3
  // without) and leave every remainder; columns that fill whole column
  // blocks, part of one, and no vector at all.
  for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15, 32, 64}) {
    for (int64_t cols : {1, 7, 16, 24, 40, 64, 100}) {
      for (bool transposed_a : {false, true}) {
        for (bool lower : {false, true}) {
          for (bool scales : {false, true}) {
            for (float beta : {0.0f, 1.0f}) {
              const int64_t depth = lower ? rows : 37;
              Check({rows, cols, depth, transposed_a, lower, scales, beta}, seed++);
            }
          }
        }
      }
    }
  }
}

TEST(SmallGemmTest, LowerTriangularWithMoreDepthThanRows) {
  // The scan's y = M X: a 64 x 64 mask, and a lower A wider than it is tall.
  Check({64, 64, 64, false, true, false, 0.0f}, 5);
  Check({10, 48, 30, false, true, true, 1.0f}, 6);
}

TEST(SmallGemmTest, ZeroDepthScalesCOrZeroesIt) {
  Check({7, 33, 0, false, false, false, 0.0f}, 7);
  Check({7, 33, 0, true, false, true, 1.0f}, 8);
}

TEST(SmallGemmTest, EmptyShapesTouchNothing) {
  std::vector<float> c(4, 2.0f);
  const float a = 1.0f, b = 1.0f;
  SmallGemm(0, 2, 1, &a, 1, 1, &b, 2, 0.0f, c.data(), 2);
  SmallGemm(2, 0, 1, &a, 1, 1, &b, 2, 0.0f, c.data(), 2);
  for (float v : c) EXPECT_EQ(v, 2.0f);
}

}  // namespace
}  // namespace lact::cpu
