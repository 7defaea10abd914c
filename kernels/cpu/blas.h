// Thin wrappers over sgemm, row-major, for the shapes the model uses.
// Matrices are described by pointer + leading dimension (row stride). The
// float32 products run on oneDNN's sgemm (dnnl_sgemm, its JIT kernels for
// the ISA it finds by CPUID) by default, or on OpenBLAS's, which picks its
// kernels by CPU model: Debian 12's OpenBLAS 0.3.21 takes Xeons newer than
// it for a Prescott and runs them at a fifth of their speed.
#ifndef LACT_KERNELS_CPU_BLAS_H_
#define LACT_KERNELS_CPU_BLAS_H_

#include <cstdint>

#include "kernels/cpu/bf16_copies.h"
#include "kernels/cpu/packed_weights.h"

namespace lact::cpu {

// What a model's GEMMs are fed: float32 operands (Operands::kFp32, the
// default and the parity mode), or operands rounded to bf16 with float32
// accumulation (Operands::kBf16, the bf16 mode, the CUDA backend's
// contract). The weights come rounded (RoundRowsToBf16 in elementwise.h);
// each activation that only GEMMs read goes through RoundForBf16Gemm below
// as it is made. Either mode may carry the model's weights packed for
// oneDNN's matmul kernels (packed_weights.h), which Linear then runs on;
// the bf16 mode also bf16 copies of other fixed operands (the fast
// weights, bf16_copies.h), which the bf16 matmul then reads in place of
// packing them. What a mode carries outlives every GEMM given it.
class Operands {
 public:
  static const Operands kFp32, kBf16;

  // This mode, with `copies` (kept in a bf16 mode only) and `packed` (null
  // for none).
  Operands With(const Bf16Copies* copies, PackedWeights* packed = nullptr) const {
    return Operands(bf16_, bf16_ ? copies : nullptr, packed);
  }
  const Bf16Copies* copies() const { return copies_; }
  PackedWeights* packed() const { return packed_; }
  bool bf16() const { return bf16_; }

 private:
  constexpr explicit Operands(bool bf16, const Bf16Copies* copies = nullptr,
                              PackedWeights* packed = nullptr)
      : bf16_(bf16), copies_(copies), packed_(packed) {}
  bool bf16_;
  const Bf16Copies* copies_;
  PackedWeights* packed_;
};
inline constexpr Operands Operands::kFp32{false};
inline constexpr Operands Operands::kBf16{true};

// Rows [0, rows) of a bf16-mode GEMM operand (row stride ld), made ready
// for Gemm(Operands::kBf16, ...): rounded to bf16 in place where the
// products run as sgemm on rounded values (the emulation), left as they are
// where they run on the bf16 matmul (Bf16MatmulOn(), bf16_matmul.h), which
// rounds each operand as it packs it, to nearest even as RoundRowsToBf16
// does: the same products, without a pass over the operand.
void RoundForBf16Gemm(float* x, int64_t ld, int64_t rows, int64_t cols);

// Which library's sgemm Gemm calls: oneDNN's (the default) or OpenBLAS's,
// process-wide (the baseline bench_ops measures beside it). Call between
// runs. The two sum in different orders: results agree to float32
// rounding, not bit for bit.
enum class SgemmLibrary { kOneDnn, kOpenBlas };
void SetSgemmLibrary(SgemmLibrary library);

// C[m, n] = alpha * op(A) @ op(B) + beta * C, op = transpose when the flag is set.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same for a model's operands. With Operands::kBf16 (operands made
// ready by RoundForBf16Gemm, or rounded) and alpha 1 it runs on the CPU's
// bf16 matmul where Bf16MatmulOn() and MatmulBf16 takes the call
// (bf16_matmul.h), reading an operand from `operands`' copies where they
// hold it; otherwise it is sgemm, whose products of the rounded
// values are the same, exact in float32 (on rounded copies of the operands
// where Bf16MatmulOn() left them unrounded).
void Gemm(Operands operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc);

// C[m, n] = op(A) @ op(B) + beta * C, beta 0 or 1, for operands made as
// bf16 values by the caller, dense (each one's leading dimension its row
// length as op leaves it: k for A, n for B; m for a transposed A, k for a
// transposed B), with float32 accumulation: a bf16-mode product without
// float32 operands to read and round. On the bf16 matmul where
// Bf16MatmulOn() and it takes the call (MatmulBf16), else sgemm on the operands widened to float32,
// exactly: the same products.
void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
              const uint16_t* b, float beta, float* c, int64_t ldc);

// A linear layer: y[rows, out] = x[rows, in] @ w[out, in]^T + beta * y.
// With kMinSliceRows rows or more for each thread, its rows are split one
// slice per thread (ForRowSlices in threading.h), each slice a single-threaded GEMM;
// otherwise (or inside a slice) it is one GEMM, threaded by its library.
// Each GEMM runs on `operands`' packed weights where it carries them and
// they take the call (PackedWeights::Linear), else it is the Operands
// overload of Gemm above.
void Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w, int64_t out,
            float* y, int64_t ldy, float beta = 0.0f, Operands operands = Operands::kFp32);

// The same with x made as bf16 values by the caller ([rows, in], dense),
// for the bf16 mode on the bf16 matmul: on `operands`' packed weights
// where they take the call, else the Linear above on x widened to float32
// (exactly: the same products).
void Linear(const uint16_t* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            int64_t ldy, float beta, Operands operands);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_BLAS_H_
