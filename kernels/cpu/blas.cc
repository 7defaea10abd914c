#include "kernels/cpu/blas.h"

#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/threading.h"

namespace lact::cpu {
namespace {

std::atomic<SgemmLibrary> sgemm_library{SgemmLibrary::kOneDnn};

// rows x cols of x (leading dimension ld), rounded to bf16, dense.
std::vector<float> RoundedCopy(const float* x, int64_t ld, int64_t rows, int64_t cols) {
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x + r * ld, cols, out.begin() + r * cols);
  RoundRowsToBf16(out.data(), cols, rows, cols);
  return out;
}

}  // namespace

void RoundForBf16Gemm(float* x, int64_t ld, int64_t rows, int64_t cols) {
  if (!Bf16MatmulOn()) RoundRowsToBf16(x, ld, rows, cols);
}

void SetSgemmLibrary(SgemmLibrary library) { sgemm_library = library; }

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (sgemm_library == SgemmLibrary::kOneDnn && k > 0 &&
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc) == dnnl_success) {
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void Gemm(Operands operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc) {
  if (operands.bf16() && Bf16MatmulOn()) {
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    const Bf16Copies* copies = operands.copies();
    const uint16_t* a_bf16 =
        copies != nullptr ? copies->Find(a, (a_rows - 1) * lda + a_cols) : nullptr;
    const uint16_t* b_bf16 =
        copies != nullptr ? copies->Find(b, (b_rows - 1) * ldb + b_cols) : nullptr;
    if (alpha == 1.0f &&
        MatmulBf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, a_bf16, b_bf16)) {
      return;
    }
    // The matmul did not take it, and the operands may be unrounded
    // (RoundForBf16Gemm leaves them to the matmul): sgemm on rounded copies.
    const std::vector<float> ra = RoundedCopy(a, lda, a_rows, a_cols);
    const std::vector<float> rb = RoundedCopy(b, ldb, b_rows, b_cols);
    Gemm(trans_a, trans_b, m, n, k, alpha, ra.data(), a_cols, rb.data(), b_cols, beta, c, ldc);
    return;
  }
  Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
              const uint16_t* b, float beta, float* c, int64_t ldc) {
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  if (Bf16MatmulOn() &&
      MatmulBf16(trans_a, trans_b, m, n, k, nullptr, lda, nullptr, ldb, beta, c, ldc, a, b)) {
    return;
  }
  const auto widen = [](const uint16_t* bits, int64_t count) {
    std::vector<float> out(count);
    for (int64_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(bits[i]);
    return out;
  };
  const std::vector<float> wa = widen(a, m * k), wb = widen(b, k * n);
  Gemm(trans_a, trans_b, m, n, k, 1.0f, wa.data(), lda, wb.data(), ldb, beta, c, ldc);
}

void Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w, int64_t out,
            float* y, int64_t ldy, float beta, Operands operands) {
  // Packed products are float32 except on the bf16 matmul: the bf16 mode's
  // emulation multiplies its rounded operands (RoundForBf16Gemm rounded x
  // in place) in float32, as Gemm would. The OpenBLAS baseline
  // (SetSgemmLibrary) runs every float32 product on OpenBLAS.
  const bool bf16_matmul = operands.bf16() && Bf16MatmulOn();
  PackedWeights* packed =
      !bf16_matmul && sgemm_library == SgemmLibrary::kOpenBlas ? nullptr : operands.packed();
  ForRowSlices(rows, kMinSliceRows, [&](int64_t begin, int64_t n, int) {
    const float* xs = x + begin * ldx;
    float* ys = y + begin * ldy;
    if (packed != nullptr && packed->Linear(xs, ldx, n, in, w, out, ys, ldy, beta, bf16_matmul)) {
      return;
    }
    Gemm(operands, false, true, n, out, in, 1.0f, xs, ldx, w, in, beta, ys, ldy);
  });
}

void Linear(const uint16_t* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            int64_t ldy, float beta, Operands operands) {
  PackedWeights* packed = operands.packed();
  ForRowSlices(rows, kMinSliceRows, [&](int64_t begin, int64_t n, int) {
    const uint16_t* xs = x + begin * in;
    float* ys = y + begin * ldy;
    if (packed != nullptr && packed->LinearBf16(xs, n, in, w, out, ys, ldy, beta)) return;
    std::vector<float> wide(n * in);
    for (int64_t i = 0; i < n * in; ++i) wide[i] = BFloat16ToFloat(xs[i]);
    Linear(wide.data(), in, n, in, w, out, ys, ldy, beta, operands);
  });
}

}  // namespace lact::cpu
