// The CPU's bf16 matmul (kernels/cpu/bf16_matmul.h) against float64 sums of
// the same bf16 operands: every transpose, leading dimensions wider than
// the rows, accumulation into C, odd and one-long sizes, a long reduction,
// operands that are not bf16 yet, and two threads multiplying at once; and
// the dispatch of the Operands overload of Gemm. The matmul tests skip,
// saying so, on a CPU without bf16 units (the bf16 mode is then emulated,
// and cpu_parity_test checks it).
#include "kernels/cpu/bf16_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/random.h"
#include "kernels/cpu/bf16_copies.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/threading.h"

namespace lact::cpu {
namespace {

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t pad;  // each leading dimension exceeds its row by this much
  float beta;
};

// A matrix of `rows` x `cols` with leading dimension cols + pad, values
// rounded to bf16 unless `raw`.
std::vector<float> Matrix(int64_t rows, int64_t cols, int64_t pad, uint64_t seed,
                          bool raw = false) {
  Random random(seed);
  std::vector<float> x(rows * (cols + pad));
  for (float& v : x) {
    v = static_cast<float>(random.Normal());
    if (!raw) v = RoundToBFloat16(v);
  }
  return x;
}

// Checks C = op(A) op(B) + beta C0 against float64 sums of the bf16 values
// of A and B; the bound is float32 accumulation's, far below a bf16
// rounding (2^-9) and far below any wrong element.
void Check(const Case& c, bool raw_operands, uint64_t seed) {
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const std::vector<float> a = Matrix(a_rows, a_cols, c.pad, seed, raw_operands);
  const std::vector<float> b = Matrix(b_rows, b_cols, c.pad, seed + 1);
  std::vector<float> out = Matrix(c.m, c.n, c.pad, seed + 2);
  const std::vector<float> before = out;
  ASSERT_TRUE(MatmulBf16(c.trans_a, c.trans_b, c.m, c.n, c.k, a.data(), lda, b.data(), ldb, c.beta,
                         out.data(), ldc));
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double x = RoundToBFloat16(c.trans_a ? a[p * lda + i] : a[i * lda + p]);
        const double y = c.trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
        magnitude += std::abs(x * y);
      }
      const double want = sum + c.beta * before[i * ldc + j];
      const double err = std::abs(out[i * ldc + j] - want);
      ASSERT_LE(err, 1e-5 * (magnitude + std::abs(want)) + 1e-30)
          << "C[" << i << ", " << j << "] = " << out[i * ldc + j] << ", want " << want;
      worst = std::max(worst, err / (magnitude + std::abs(want) + 1e-30));
    }
    for (int64_t j = c.n; j < ldc; ++j)
      ASSERT_EQ(out[i * ldc + j], before[i * ldc + j]) << "padding of row " << i << " written";
  }
  std::printf("%dx%dx%d trans %d%d beta %g: worst relative error %.2g\n", int(c.m), int(c.n),
              int(c.k), c.trans_a, c.trans_b, c.beta, worst);
}

class Bf16MatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HasBf16Matmul()) GTEST_SKIP() << "no bf16 matmul here: " << Bf16MatmulKernel();
  }
};

TEST(Bf16Matmul, ProbeMatchesTheCpu) {
  __builtin_cpu_init();
  std::printf("bf16 matmul: %s\n", Bf16MatmulKernel().c_str());
  EXPECT_EQ(HasBf16Matmul(), __builtin_cpu_supports("avx512bf16") != 0) << Bf16MatmulKernel();
  std::printf("default: %s (%s)\n", Bf16MatmulOn() ? "on" : "off", Bf16MatmulReason().c_str());
  if (std::getenv("LACT_CPU_BF16_MATMUL") == nullptr) {
    const bool amx = Bf16MatmulKernel().find("amx") != std::string::npos;
    EXPECT_EQ(Bf16MatmulOn(), HasBf16Matmul() && (amx || __builtin_cpu_is("amd") != 0))
        << "on by default on AMX and on AMD's AVX512_BF16 only";
  }
}

TEST_F(Bf16MatmulTest, EveryLayoutAgainstFloat64) {
  const std::vector<Case> cases = {
      {false, true, 300, 70, 130, 0, 0.0f},  // a Linear: x @ w^T
      {false, false, 257, 33, 65, 3, 0.0f},  // dH = V w1
      {true, false, 64, 48, 3000, 5, 1.0f},  // a gradient sum over tokens, accumulated
      {true, true, 17, 19, 23, 1, 1.0f},     // both transposed
      {false, true, 1, 1, 1, 0, 0.0f},       // one element
      {false, true, 513, 6, 256, 2, 0.0f},   // six outputs (the learning rates)
      {false, true, 40, 129, 1, 7, 1.0f},    // a one-long reduction
      // A head's columns of a wider result (the fast-weight apply's
      // output), written and accumulated: oneDNN's brgemm takes only a
      // dense C, so these go through the dense scratch where it runs.
      {false, true, 300, 128, 256, 128, 0.0f},
      {false, true, 300, 128, 256, 128, 1.0f},
  };
  uint64_t seed = 11;
  for (const Case& c : cases) Check(c, /*raw_operands=*/false, seed += 10);
}

TEST_F(Bf16MatmulTest, RoundsOperandsThatAreNotBf16Yet) {
  Check({false, true, 96, 80, 200, 4, 0.0f}, /*raw_operands=*/true, 5);
  Check({true, false, 80, 96, 200, 0, 1.0f}, /*raw_operands=*/true, 6);
}

// What it cannot compute it leaves to sgemm, C untouched: a zero-long
// reduction, a beta other than 0 or 1.
TEST_F(Bf16MatmulTest, DeclinesWhatItDoesNotCompute) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(16, 3.0f);
  EXPECT_FALSE(MatmulBf16(false, true, 4, 4, 0, a.data(), 1, b.data(), 1, 0.0f, c.data(), 4));
  EXPECT_FALSE(MatmulBf16(false, true, 4, 4, 4, a.data(), 4, b.data(), 4, 0.5f, c.data(), 4));
  for (float v : c) EXPECT_EQ(v, 3.0f);
  Gemm(Operands::kBf16, false, true, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.5f, c.data(), 4);
  for (float v : c) EXPECT_EQ(v, 5.5f) << "sgemm's 4 + 0.5 * 3";
}

TEST_F(Bf16MatmulTest, ThreadsMultiplyAtOnce) {
  SetNumThreads(2);
  const int slices = ForRowSlices(1024, 256, [&](int64_t, int64_t, int slot) {
    for (int round = 0; round < 3; ++round)
      Check({slot == 0, true, 200 + slot, 90, 150, 2, round == 2 ? 1.0f : 0.0f}, false,
            100 + slot * 7 + round);
  });
  SetNumThreads(0);
  EXPECT_EQ(slices, 2);
}

// Gemm(Operands::kBf16, ...) takes the bf16 matmul only where it is on and
// the call is one it computes (alpha 1, beta 0 or 1); sgemm otherwise.
// Given operands that are not bf16, the two differ: the matmul rounds them.
TEST_F(Bf16MatmulTest, GemmDispatchesBf16OperandsToTheMatmul) {
  const bool was_on = Bf16MatmulOn();
  SetBf16Matmul(true);
  const int64_t k = 256;
  std::vector<float> a(k), b(k, 1.0f);
  Random random(3);
  for (float& v : a) v = static_cast<float>(random.Normal());
  auto dot = [&](Operands operands, float alpha) {
    float c = 0;
    Gemm(operands, false, true, 1, 1, k, alpha, a.data(), k, b.data(), k, 0.0f, &c, 1);
    return c;
  };
  float direct = 0;
  Gemm(false, true, 1, 1, k, 1.0f, a.data(), k, b.data(), k, 0.0f, &direct, 1);
  float matmul = 0;
  ASSERT_TRUE(MatmulBf16(false, true, 1, 1, k, a.data(), k, b.data(), k, 0.0f, &matmul, 1));
  ASSERT_GT(std::abs(direct - matmul), 1e-4f * std::abs(direct)) << "the matmul did not round";
  EXPECT_EQ(dot(Operands::kFp32, 1.0f), direct);
  EXPECT_EQ(dot(Operands::kBf16, 1.0f), matmul);
  // alpha != 1 is sgemm's, on copies of the operands rounded as the matmul
  // would round them (RoundForBf16Gemm leaves operands unrounded for it).
  std::vector<float> ra = a, rb = b;
  RoundRowsToBf16(ra.data(), k, 1, k);
  RoundRowsToBf16(rb.data(), k, 1, k);
  float rounded = 0;
  Gemm(false, true, 1, 1, k, 2.0f, ra.data(), k, rb.data(), k, 0.0f, &rounded, 1);
  ASSERT_NE(rounded, 2.0f * direct);
  EXPECT_EQ(dot(Operands::kBf16, 2.0f), rounded) << "alpha != 1: sgemm on rounded copies";
  SetBf16Matmul(false);
  EXPECT_EQ(dot(Operands::kBf16, 1.0f), direct);
  SetBf16Matmul(was_on);
}

// An operand made ready for the bf16 GEMMs is rounded in place for the
// emulation, and left for the matmul to round where the matmul runs.
TEST(Bf16Matmul, RoundForBf16GemmRoundsOnlyForTheEmulation) {
  const bool was_on = Bf16MatmulOn();
  Random random(5);
  std::vector<float> x(3 * 40);
  for (float& v : x) v = static_cast<float>(random.Normal());
  std::vector<float> want = x;
  RoundRowsToBf16(want.data(), 40, 3, 33);  // 33 of each row's 40 columns
  SetBf16Matmul(false);
  std::vector<float> emulated = x;
  RoundForBf16Gemm(emulated.data(), 40, 3, 33);
  EXPECT_EQ(emulated, want);
  if (HasBf16Matmul()) {
    SetBf16Matmul(true);
    std::vector<float> matmul = x;
    RoundForBf16Gemm(matmul.data(), 40, 3, 33);
    EXPECT_EQ(matmul, x);
  }
  SetBf16Matmul(was_on);
}

// Where the matmul is off (or absent), a model's bf16 operands go to sgemm
// as they are: exactly the float32 call's result, even for operands that
// are not bf16 (the matmul would round them).
TEST(Bf16Matmul, OffItIsSgemm) {
  const bool was_on = Bf16MatmulOn();
  SetBf16Matmul(false);
  ASSERT_FALSE(Bf16MatmulOn());
  const int64_t m = 33, n = 17, k = 65;
  Random random(9);
  std::vector<float> a(m * k), b(n * k), direct(m * n), bf16(m * n);
  for (float& v : a) v = static_cast<float>(random.Normal());
  for (float& v : b) v = static_cast<float>(random.Normal());
  Gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, direct.data(), n);
  Gemm(Operands::kBf16, false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, bf16.data(), n);
  EXPECT_EQ(bf16, direct);
  SetBf16Matmul(was_on);
}

// A copy is found for any range inside one array put there, at its offset,
// and for nothing that reaches past that array; a second Put replaces it.
TEST(Bf16Copies, FindsRangesInsideOneArrayOnly) {
  std::vector<float> first(100), second(50);
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<float>(i);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<float>(1000 + i);
  Bf16Copies copies;
  EXPECT_EQ(copies.Find(first.data(), 1), nullptr) << "nothing put yet";
  copies.Put(first.data(), 100);
  copies.Put(second.data(), 50);
  EXPECT_EQ(copies.size(), 2);
  const uint16_t* whole = copies.Find(first.data(), 100);
  ASSERT_NE(whole, nullptr);
  const uint16_t* middle = copies.Find(first.data() + 40, 60);
  ASSERT_EQ(middle, whole + 40);
  EXPECT_EQ(middle[0], FloatToBFloat16(40.0f));
  EXPECT_EQ(copies.Find(first.data() + 40, 61), nullptr) << "past the array's end";
  EXPECT_EQ(copies.Find(first.data() + 100, 1), nullptr) << "just past the array";
  const uint16_t* other = copies.Find(second.data() + 49, 1);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(*other, FloatToBFloat16(1049.0f));
  second[49] = 7.0f;
  EXPECT_EQ(*copies.Find(second.data() + 49, 1), FloatToBFloat16(1049.0f)) << "until Put again";
  copies.Put(second.data(), 50);
  EXPECT_EQ(*copies.Find(second.data() + 49, 1), FloatToBFloat16(7.0f));
  EXPECT_EQ(copies.size(), 2);
}

// With copies of its operands, Gemm(Operands::kBf16) on the matmul reads
// the copies, not the float arrays: changed arrays with their old copies
// give the old product, bit for bit; a strided operand is packed instead.
TEST_F(Bf16MatmulTest, GemmReadsOperandsFromTheirCopies) {
  const bool was_on = Bf16MatmulOn();
  SetBf16Matmul(true);
  const int64_t m = 70, n = 48, k = 96;
  std::vector<float> a = Matrix(m, k, 0, 21), w = Matrix(n, k, 0, 22);
  std::vector<float> packed(m * n), copied(m * n);
  Gemm(Operands::kBf16, false, true, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f, packed.data(),
       n);
  Bf16Copies copies;
  copies.Put(a.data(), m * k);
  copies.Put(w.data(), n * k);
  std::fill(a.begin(), a.end(), 1.0f);
  std::fill(w.begin(), w.end(), 1.0f);
  const Operands with = Operands::kBf16.With(&copies);
  EXPECT_TRUE(with.bf16());
  EXPECT_EQ(with.copies(), &copies);
  EXPECT_EQ(Operands::kFp32.With(&copies).copies(), nullptr) << "float32 operands have no copies";
  Gemm(with, false, true, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f, copied.data(), n);
  EXPECT_EQ(copied, packed);
  // B's first 48 columns with row stride 96: not dense, packed from w's
  // (now all-ones) values.
  std::vector<float> strided(m * n);
  Gemm(with, false, false, m, n, n, 1.0f, a.data(), k, w.data(), k, 0.0f, strided.data(), n);
  for (float v : strided) ASSERT_EQ(v, 48.0f);
  SetBf16Matmul(was_on);
}

// GemmBf16 on operands given as bf16 bits, against float64 sums of their
// values: every transpose, accumulation, on the matmul where this CPU has
// one and on its sgemm fallback (the operands widened) everywhere, and the
// two agree to float32 accumulation.
TEST(Bf16Matmul, GemmBf16OnBitsAgainstFloat64) {
  const bool was_on = Bf16MatmulOn();
  for (const bool matmul : {true, false}) {
    if (matmul && !HasBf16Matmul()) continue;
    SetBf16Matmul(matmul);
    for (const Case& c : std::vector<Case>{{false, true, 70, 130, 96, 0, 0.0f},
                                           {false, false, 65, 128, 33, 0, 1.0f},
                                           {true, false, 128, 64, 300, 0, 1.0f},
                                           {true, true, 17, 19, 23, 0, 0.0f}}) {
      const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
      const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
      const std::vector<float> a = Matrix(a_rows, a_cols, 0, 31), b = Matrix(b_rows, b_cols, 0, 32);
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      PackRowsToBf16(a.data(), a_cols, a_rows, a_cols, a16.data());
      PackRowsToBf16(b.data(), b_cols, b_rows, b_cols, b16.data());
      const int64_t ldc = c.n + 3;  // C's rows wider than n
      std::vector<float> out = Matrix(c.m, ldc, 0, 33);
      const std::vector<float> before = out;
      GemmBf16(c.trans_a, c.trans_b, c.m, c.n, c.k, a16.data(), b16.data(), c.beta, out.data(),
               ldc);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            const double x = c.trans_a ? a[p * a_cols + i] : a[i * a_cols + p];
            const double y = c.trans_b ? b[j * b_cols + p] : b[p * b_cols + j];
            sum += x * y;
            magnitude += std::abs(x * y);
          }
          const double want = sum + c.beta * before[i * ldc + j];
          ASSERT_LE(std::abs(out[i * ldc + j] - want), 1e-5 * (magnitude + std::abs(want)))
              << (matmul ? "matmul" : "sgemm") << " C[" << i << ", " << j << "] trans " << c.trans_a
              << c.trans_b;
        }
        for (int64_t j = c.n; j < ldc; ++j)
          ASSERT_EQ(out[i * ldc + j], before[i * ldc + j]) << "padding of row " << i << " written";
      }
    }
  }
  SetBf16Matmul(was_on);
}

// The norms that write bf16 operands: each value within a bf16 rounding
// of the float64 norm, and bit for bit the float32 norm's value rounded
// to nearest even (what RoundRowsToBf16 makes of it).
TEST(Bf16Operands, NormsWrittenAsBf16AreTheRoundedFloat32Norms) {
  const int64_t rows = 37, cols = 96, ld = 100;
  const std::vector<float> x = Matrix(rows, cols, ld - cols, 41, /*raw=*/true);
  const std::vector<float> z = Matrix(rows, cols, ld - cols, 42, /*raw=*/true);
  const std::vector<float> w = Matrix(1, cols, 0, 43, /*raw=*/true);
  std::vector<float> plain(rows * cols), gated = x, gated_scratch = x;
  std::vector<uint16_t> plain16(rows * cols), gated16(rows * cols);
  RmsNormRows(x.data(), ld, rows, cols, w.data(), plain.data(), cols);
  RmsNormRowsToBf16(x.data(), ld, rows, cols, w.data(), plain16.data());
  GatedRmsNormRows(gated.data(), ld, z.data(), ld, rows, cols, w.data());
  GatedRmsNormRowsToBf16(gated_scratch.data(), ld, z.data(), ld, rows, cols, w.data(),
                         gated16.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, gss = 0;
    std::vector<double> g(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x[r * ld + c], zc = z[r * ld + c];
      g[c] = v * zc / (1 + std::exp(-zc));
      ss += v * v;
      gss += g[c] * g[c];
    }
    const double inv = 1 / std::sqrt(ss / cols + kRmsNormEps);
    const double ginv = 1 / std::sqrt(gss / cols + kRmsNormEps);
    for (int64_t c = 0; c < cols; ++c) {
      const double want = x[r * ld + c] * inv * w[c], gwant = g[c] * ginv * w[c];
      const float got = BFloat16ToFloat(plain16[r * cols + c]);
      const float gotg = BFloat16ToFloat(gated16[r * cols + c]);
      ASSERT_LE(std::abs(got - want), 0x1p-8 * std::abs(want) + 1e-6) << r << ", " << c;
      ASSERT_LE(std::abs(gotg - gwant), 0x1p-8 * std::abs(gwant) + 1e-6) << r << ", " << c;
      ASSERT_EQ(plain16[r * cols + c], FloatToBFloat16(plain[r * cols + c])) << r << ", " << c;
      ASSERT_EQ(gated16[r * cols + c], FloatToBFloat16(gated[r * ld + c])) << r << ", " << c;
    }
  }
}

// Linear on bf16 rows: bit for bit the float32 overload on the same values
// widened, on packed weights and on the fallback (no packed weights), with
// accumulation into y.
TEST(Bf16Operands, LinearOnBf16RowsIsLinearOnTheirValues) {
  const int64_t rows = 600, in = 96, out = 80;  // two row slices on two threads
  const std::vector<float> x = Matrix(rows, in, 0, 51), w = Matrix(out, in, 0, 52);
  std::vector<uint16_t> x16(x.size());
  PackRowsToBf16(x.data(), in, rows, in, x16.data());
  PackedWeights packed;
  for (const Operands operands : {Operands::kBf16.With(nullptr, &packed), Operands::kBf16}) {
    const std::vector<float> start = Matrix(rows, out, 0, 53);
    std::vector<float> from_bits = start, from_floats = start;
    Linear(x16.data(), rows, in, w.data(), out, from_bits.data(), out, 1.0f, operands);
    Linear(x.data(), in, rows, in, w.data(), out, from_floats.data(), out, 1.0f, operands);
    EXPECT_EQ(from_bits, from_floats) << (operands.packed() ? "packed" : "unpacked");
    EXPECT_NE(from_bits, start);
  }
}

}  // namespace
}  // namespace lact::cpu
