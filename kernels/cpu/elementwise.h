// Row-wise normalisations and the scalar activations of docs/model.md, float32.
// Loops run in parallel over rows on the shared OpenMP pool.
#ifndef LACT_KERNELS_CPU_ELEMENTWISE_H_
#define LACT_KERNELS_CPU_ELEMENTWISE_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace lact::cpu {

// exp(x) for float32 without branches, so that loops calling it vectorise
// (glibc's expf is a scalar call here): Cody-Waite reduction to
// r in [-ln2/2, ln2/2], Cephes' degree-6 polynomial for e^r, times 2^n.
// Relative error below 2e-7 on [-87, 88]; inputs are clamped to that range.
// T is float or Vec (simd.h): the same operations lane by lane.
template <typename T>
inline T FastExpOf(T x) {
  const T hi = T{} + 88.3762626647949f, lo = T{} - 87.3365447505531f;
  x = x > hi ? hi : x;  // not std::min: a reference defeats vectorisation
  x = x < lo ? lo : x;
  const T n = RoundToInt(x * 1.44269504088896341f);
  const T r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return ScaleByPow2(p, n);
}
inline float FastExp(float x) { return FastExpOf(x); }
inline Vec FastExp(Vec x) { return FastExpOf(x); }

template <typename T>
inline T SigmoidOf(T x) {
  return 1.0f / (1.0f + FastExpOf(-x));
}
template <typename T>
inline T SiluOf(T x) {
  return x / (1.0f + FastExpOf(-x));
}
inline float Sigmoid(float x) { return SigmoidOf(x); }
inline float Silu(float x) { return SiluOf(x); }

// log(1 + e^x) as max(x, 0) + log1p(u), u = e^-|x| in (0, 1], without
// library calls (so that loops vectorise): log1p(u) = 2 atanh(s) with
// s = u / (2 + u) <= 1/3, atanh's odd series to s^15 (the next term is
// below 2^-24 of the sum). Relative error below 3e-7. T as FastExpOf's.
template <typename T>
inline T SoftplusOf(T x) {
  const T zero = T{};
  const T u = FastExpOf(x < zero ? x : -x);
  const T s = u / (u + 2.0f);
  const T s2 = s * s;
  T p = T{} + 1.0f / 15;
  p = p * s2 + 1.0f / 13;
  p = p * s2 + 1.0f / 11;
  p = p * s2 + 1.0f / 9;
  p = p * s2 + 1.0f / 7;
  p = p * s2 + 1.0f / 5;
  p = p * s2 + 1.0f / 3;
  p = p * s2 + 1.0f;
  return (x > zero ? x : zero) + 2.0f * s * p;
}
inline float Softplus(float x) { return SoftplusOf(x); }
inline double InvSoftplus(double y) { return y + std::log(-std::expm1(-y)); }

constexpr float kRmsNormEps = 1e-5f;
constexpr float kL2NormEps = 1e-5f;

// y[r, :cols] = x[r] / sqrt(mean(x[r]^2) + eps) * w. y may alias x.
void RmsNormRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float* y,
                 int64_t ldy);

// The same rounded to bf16 (nearest even) and written as bf16 bits,
// [rows, cols] dense: a bf16 product's operand made as it is normed.
void RmsNormRowsToBf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w,
                       uint16_t* y);

// The Mamba-2 gated norm in one pass: y[r] = rmsnorm(y[r] * silu(z[r]), w)
// over `cols` channels, in place.
void GatedRmsNormRows(float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                      int64_t cols, const float* w);

// The same written to `out` as bf16 bits ([rows, cols] dense, rounded to
// nearest even); y is only read.
void GatedRmsNormRowsToBf16(const float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                            int64_t cols, const float* w, uint16_t* out);

// x[r, g*group:(g+1)*group] /= (||.||_2 + eps) for every group, in place.
void L2NormGroups(float* x, int64_t ldx, int64_t rows, int64_t groups, int64_t group);

// x[r, c] = silu(x[r, c]) in place.
void SiluRows(float* x, int64_t ldx, int64_t rows, int64_t cols);

// x[r, :cols] rounded to bf16 in place (RoundToBFloat16, common/half.h):
// what the bf16 mode feeds its GEMMs. A product of two such values is
// exact in float32, so a float32 GEMM of rounded operands computes what a
// bf16 GEMM with float32 accumulation does.
void RoundRowsToBf16(float* x, int64_t ldx, int64_t rows, int64_t cols);

// out[r * cols + c] = x[r, c] as bf16 bits (nearest even), rows x cols of
// x (row stride ldx) packed densely: a bf16 product's operand. On the
// calling thread (the callers run inside row slices).
void PackRowsToBf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* out);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_ELEMENTWISE_H_
