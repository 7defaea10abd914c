// Linear layers on weights packed for oneDNN's matmul kernels
// (kernels/cpu/packed_weights.h) against float64 sums: float32 and bf16,
// row strides wider than the rows, accumulation into y, one row and a
// ragged row count, an output six wide (the learning rates), a sub-block
// of a weight's rows (the key and value rows of qkv), repeated calls on the
// cached primitive, x given as bf16, two threads packing and multiplying at
// once; and what
// it declines (strided rows too), leaving y as it was.
#include "kernels/cpu/packed_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/random.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/threading.h"

namespace lact::cpu {
namespace {

std::vector<float> Normal(int64_t n, uint64_t seed, bool bf16 = false) {
  Random random(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    v = static_cast<float>(random.Normal());
    if (bf16) v = RoundToBFloat16(v);
  }
  return x;
}

struct Case {
  int64_t rows, in, out;
  int64_t pad;  // ldx = in + pad, ldy = out + pad
  float beta;
};

// Runs y = x w^T + beta y on `packed` and checks it against float64 sums of
// the operands as the mode multiplies them: as they are (float32), or
// rounded to bf16, with float32 accumulation's bound either way.
void Check(PackedWeights& packed, const Case& c, const std::vector<float>& w, bool bf16,
           uint64_t seed) {
  SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.in) + " -> " +
               std::to_string(c.out) + (bf16 ? " bf16" : " f32") + " beta " +
               std::to_string(c.beta));
  const int64_t ldx = c.in + c.pad, ldy = c.out + c.pad;
  const std::vector<float> x = Normal(c.rows * ldx, seed);
  std::vector<float> y = Normal(c.rows * ldy, seed + 1);
  const std::vector<float> before = y;
  if (!packed.Linear(x.data(), ldx, c.rows, c.in, w.data(), c.out, y.data(), ldy, c.beta, bf16)) {
    // oneDNN 2.6 runs its brgemm kernels on the packed layout for dense
    // rows only (the model's linear layers all read and write dense rows);
    // a declined product leaves y.
    ASSERT_GT(c.pad, 0) << "declined a dense product";
    ASSERT_EQ(y, before);
    return;
  }
  const auto operand = [&](float v) -> double { return bf16 ? RoundToBFloat16(v) : v; };
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t o = 0; o < c.out; ++o) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < c.in; ++i) {
        const double term = operand(x[r * ldx + i]) * operand(w[o * c.in + i]);
        sum += term;
        magnitude += std::fabs(term);
      }
      const double prior = c.beta * before[r * ldy + o];
      ASSERT_NEAR(y[r * ldy + o], sum + prior, 1e-5 * (magnitude + std::fabs(prior)) + 1e-30)
          << "at (" << r << ", " << o << ")";
    }
    for (int64_t o = c.out; o < ldy; ++o) {
      ASSERT_EQ(y[r * ldy + o], before[r * ldy + o]) << "padding of row " << r << " written";
    }
  }
}

class PackedWeightsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !HasBf16Matmul()) {
      GTEST_SKIP() << "no bf16 matmul here: " << Bf16MatmulKernel();
    }
  }
  bool bf16() const { return GetParam(); }
};

TEST_P(PackedWeightsTest, MatchesFloat64SumsOnEveryShape) {
  PackedWeights packed;
  const std::vector<Case> cases = {
      {512, 256, 1024, 0, 0.0f},  // an MLP gate
      {300, 96, 40, 0, 1.0f},     // accumulated
      {300, 96, 40, 5, 1.0f},     // strided: run, or declined
      {1, 64, 33, 0, 0.0f},       // one row
      {37, 64, 6, 3, 0.0f},       // six outputs
  };
  uint64_t seed = 3;
  // All alive at once: a weight's memory must not be reused while packed.
  std::vector<std::vector<float>> weights;
  for (const Case& c : cases) {
    weights.push_back(Normal(c.out * c.in, seed++, bf16()));
    for (int round = 0; round < 2; ++round) {
      Check(packed, c, weights.back(), bf16(), seed++);  // the second on the cached primitive
    }
  }
  EXPECT_EQ(packed.size(), 5);
}

// x given as bf16 values: the product Linear makes from the float32 x it
// rounds, bit for bit (the same packed weight and primitive).
TEST(PackedWeights, Bf16RowsGivenAsBf16) {
  if (!HasBf16Matmul()) GTEST_SKIP() << "no bf16 matmul here: " << Bf16MatmulKernel();
  PackedWeights packed;
  const int64_t rows = 300, in = 256, out = 128;
  const std::vector<float> w = Normal(out * in, 15, true), x = Normal(rows * in, 16);
  std::vector<uint16_t> x16(rows * in);
  for (int64_t i = 0; i < rows * in; ++i) x16[i] = FloatToBFloat16(x[i]);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> from_f32 = Normal(rows * out, 17), from_bf16 = from_f32;
    ASSERT_TRUE(
        packed.Linear(x.data(), in, rows, in, w.data(), out, from_f32.data(), out, beta, true));
    ASSERT_TRUE(
        packed.LinearBf16(x16.data(), rows, in, w.data(), out, from_bf16.data(), out, beta));
    EXPECT_EQ(from_bf16, from_f32) << "beta " << beta;
  }
  std::vector<float> y(4 * out, 3.0f);
  EXPECT_FALSE(packed.LinearBf16(x16.data(), 4, in, w.data(), out, y.data(), out, 0.5f));
  for (float v : y) EXPECT_EQ(v, 3.0f);
}

TEST_P(PackedWeightsTest, ASubBlockOfAWeightsRowsIsItsOwnWeight) {
  PackedWeights packed;
  const int64_t in = 64;
  const std::vector<float> qkv = Normal(3 * 48 * in, 9, bf16());
  const std::vector<float> kv(qkv.begin() + 48 * in, qkv.end());
  Check(packed, {50, in, 96, 0, 0.0f}, kv, bf16(), 10);
  // The same rows through the whole tensor's address: a weight of its own.
  std::vector<float> x = Normal(50 * in, 11), from_block(50 * 96), copied(50 * 96);
  ASSERT_TRUE(packed.Linear(x.data(), in, 50, in, qkv.data() + 48 * in, 96, from_block.data(), 96,
                            0.0f, bf16()));
  ASSERT_TRUE(packed.Linear(x.data(), in, 50, in, kv.data(), 96, copied.data(), 96, 0.0f, bf16()));
  EXPECT_EQ(from_block, copied);
  EXPECT_EQ(packed.size(), 2);
}

TEST_P(PackedWeightsTest, TwoThreadsPackAndMultiplyAtOnce) {
  PackedWeights packed;
  const std::vector<float> w = Normal(128 * 256, 12, bf16());
  SetNumThreads(2);
  const int slices = ForRowSlices(1024, 256, [&](int64_t, int64_t, int slot) {
    for (int round = 0; round < 3; ++round) {
      Check(packed, {200 + slot, 256, 128, 0, round == 2 ? 1.0f : 0.0f}, w, bf16(),
            20 + 7 * slot + round);
    }
  });
  SetNumThreads(0);
  EXPECT_EQ(slices, 2);
  EXPECT_EQ(packed.size(), 1) << "packed once";
}

TEST_P(PackedWeightsTest, DeclinesWhatItDoesNotCompute) {
  PackedWeights packed;
  const std::vector<float> w = Normal(8 * 16, 13, bf16()), x = Normal(4 * 16, 14);
  std::vector<float> y(4 * 8, 3.0f);
  EXPECT_FALSE(packed.Linear(x.data(), 16, 4, 16, w.data(), 8, y.data(), 8, 0.5f, bf16()));
  EXPECT_FALSE(packed.Linear(x.data(), 16, 4, 0, w.data(), 8, y.data(), 8, 0.0f, bf16()));
  for (float v : y) EXPECT_EQ(v, 3.0f);
  EXPECT_TRUE(packed.Linear(x.data(), 16, 0, 16, w.data(), 8, y.data(), 8, 0.0f, bf16()))
      << "no rows: nothing to do";
  for (float v : y) EXPECT_EQ(v, 3.0f);
}

INSTANTIATE_TEST_SUITE_P(Precisions, PackedWeightsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "bf16" : "f32");
                         });

}  // namespace
}  // namespace lact::cpu
