// bf16 matrix products on the CPU's own bf16 units, through oneDNN's
// matmul (its brgemm kernels for AVX512_BF16, and AMX where the CPU has
// it). The operands arrive as float32 arrays whose values are bf16 (the
// bf16 mode rounds every GEMM operand once, RoundRowsToBf16 in
// elementwise.h); they are packed to bf16 and multiplied with float32
// accumulation into a float32 result. A product of two bf16 values is
// exact in float32, so this computes what sgemm computes on the same
// rounded operands, up to the order of the float32 sums.
//
// Primitives are created once per shape, thread count and thread and
// reused (at most kMaxPrimitives per thread; past that the cache starts
// over); the packing scratch is per thread, as is a dense C for a result
// whose rows are strided where only a dense one runs on the bf16 kernels
// (bf16_matmul.cc). Called inside a parallel
// region (a row slice) a matmul runs on the calling thread only.
#ifndef LACT_KERNELS_CPU_BF16_MATMUL_H_
#define LACT_KERNELS_CPU_BF16_MATMUL_H_

#include <cstdint>
#include <string>

namespace lact::cpu {

// Whether this CPU has bf16 dot-product instructions (AVX512_BF16) and
// oneDNN runs a bf16 matmul on them rather than its reference kernel.
// Probed once, on first call.
bool HasBf16Matmul();

// oneDNN's name for the kernel it picked ("brg:avx512_core_bf16", ...),
// or why there is none.
std::string Bf16MatmulKernel();

// Whether the bf16 mode's GEMMs use the bf16 matmul or float32 sgemm on
// the rounded operands (the emulation: the same numerics at float32
// speed). The default is the matmul where oneDNN runs it on AMX
// (Bf16MatmulKernel() names an amx kernel), whose tiles multiply bf16 many
// times faster than float32 FMAs, and on AMD CPUs (Zen 4 and later, the
// ones with AVX512_BF16), where one bf16 dot-product instruction does the
// work of two float32 FMAs: the matmul measured 1.6x sgemm's rate on Zen 4
// and Zen 5. On an Intel CPU with AVX512_BF16 but no AMX a bf16 dot
// product does the work of one FMA and oneDNN's bf16 matmul ran at about
// half its sgemm's rate, so there the emulation is the default. LACT_CPU_BF16_MATMUL in the
// environment overrides the default where HasBf16Matmul(): 1, true, on or yes for the matmul; 0,
// false, off or no for the emulation (another value is ignored, and Bf16MatmulReason() says so).
// Process-wide; turning it on without HasBf16Matmul() leaves it off. Call between runs.
void SetBf16Matmul(bool on);
bool Bf16MatmulOn();

// Why Bf16MatmulOn() is what it is, for logs: "runs on AMX", "AMD's ...",
// "Intel without AMX ...",
// the environment's override, or "set in this process".
std::string Bf16MatmulReason();

// The most primitives a thread keeps.
constexpr int kMaxPrimitives = 256;

// C[m, n] = op(A) @ op(B) + beta * C with beta 0 or 1, op = transpose when
// the flag is set; row-major, pointer + leading dimension. A's and B's
// values should be bf16 (others are rounded to nearest even as they are
// packed). Where `a_bf16` (or `b_bf16`) is given and A (B) is dense (its
// leading dimension its row length), it is A's (B's) values as bf16, laid
// out as A (B), and is read in place of packing A (B); `a` (`b`) is then
// not read and may be null. Returns false, leaving C as it was, where it
// cannot run: no HasBf16Matmul(), k == 0, another beta, or oneDNN failing
// (an exception it throws does not escape); the caller then uses sgemm
// (Gemm in blas.h does), whose numerics on rounded operands are the same.
bool MatmulBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                const uint16_t* a_bf16 = nullptr, const uint16_t* b_bf16 = nullptr);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_BF16_MATMUL_H_
