// Register-blocked float32 products for the SSD scan's per-chunk matrices:
// a few dozen rows, sums of at most a few hundred terms, a head's columns.
// At those sizes oneDNN's sgemm spends about as long on each call's set-up
// (its driver, a scratch allocation) as on the arithmetic; these keep a
// block of C in vector registers and have no set-up.
//
//   C[i, 0:cols] = beta * C[i, 0:cols] + row_scale[i] * sum_{k < depth} A(i, k) B[k, 0:cols]
//
// for i < rows, where A(i, k) = a[i * a_row + k * a_col]: a_row = lda and
// a_col = 1 for a row-major A, a_row = 1 and a_col = lda for an A stored
// transposed. B and C are row-major with row strides ldb and ldc. With
// beta == 0, C is written without being read. `lower` declares A lower
// triangular (A(i, k) == 0 for k > i), and the terms past the diagonal's
// block are skipped. A null row_scale is all ones (the scale saves the
// caller a scaled copy of A). The sums run in k order with fused
// multiply-adds.
#ifndef LACT_KERNELS_CPU_SMALL_GEMM_H_
#define LACT_KERNELS_CPU_SMALL_GEMM_H_

#include <cstdint>

namespace lact::cpu {

void SmallGemm(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
               bool lower = false, const float* row_scale = nullptr);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_SMALL_GEMM_H_
