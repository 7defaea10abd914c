// One vector register of floats as a GCC vector type, for the kernels that
// keep their blocks in registers (SmallGemm, the SSD scan's chunk masks)
// and the elementwise loops (written once for float and Vec, ForEachVector):
// 16 lanes with AVX-512, 8 otherwise. Arithmetic, comparisons (lane masks
// of IntVec) and ?: work lane-wise; a scalar operand is broadcast. Explicit
// vectors, because GCC's own vectorisation of such loops picks 256-bit
// registers on AVX-512 CPUs and ran the SiLU 1.3x slower.
#ifndef LACT_KERNELS_CPU_SIMD_H_
#define LACT_KERNELS_CPU_SIMD_H_

#include <bit>
#include <cstdint>
#include <cstring>

#include "common/half.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lact::cpu {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#else
inline constexpr int kLanes = 8;
#endif

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t IntVec __attribute__((vector_size(kLanes * sizeof(int32_t))));
typedef uint32_t UintVec __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t HalfVec __attribute__((vector_size(kLanes * sizeof(uint16_t))));

// Unaligned loads and stores of kLanes floats.
inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

inline Vec Splat(float x) { return Vec{} + x; }

// 0, 1, ..., kLanes - 1, plus `first`.
inline IntVec Iota(int32_t first) {
  IntVec v;
  for (int i = 0; i < kLanes; ++i) v[i] = first + i;
  return v;
}

// FastExp's steps (elementwise.h) for float and Vec: x rounded to the
// nearest integer (ties to even), for |x| < 2^22; and p * 2^n for integral
// n in [-126, 127].
inline float RoundToInt(float x) {
  // Adding and removing 1.5 * 2^23 (std::floor is a library call here and
  // would stop vectorisation).
  return (x + 12582912.0f) - 12582912.0f;
}
inline float ScaleByPow2(float p, float n) {
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}
#if defined(__AVX512F__)
// (The maskz forms: the plain ones trip GCC 12's -Wmaybe-uninitialized.)
inline Vec RoundToInt(Vec x) {
  return reinterpret_cast<Vec>(
      _mm512_maskz_roundscale_ps(0xffff, reinterpret_cast<__m512>(x), _MM_FROUND_TO_NEAREST_INT));
}
inline Vec ScaleByPow2(Vec p, Vec n) {
  return reinterpret_cast<Vec>(
      _mm512_maskz_scalef_ps(0xffff, reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n)));
}
#else
inline Vec RoundToInt(Vec x) { return (x + 12582912.0f) - 12582912.0f; }
inline Vec ScaleByPow2(Vec p, Vec n) {
  const IntVec bits = (__builtin_convertvector(n, IntVec) + 127) << 23;
  Vec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
#endif

// A float or a vector of floats from p, by the type of the first argument.
inline float LoadLike(float, const float* p) { return *p; }
inline Vec LoadLike(Vec, const float* p) { return Load(p); }

// v written at p: as float32, or as bf16 bits rounded to nearest even
// (FloatToBFloat16, common/half.h).
inline void Put(float v, float* p) { *p = v; }
inline void Put(Vec v, float* p) { Store(p, v); }
inline void Put(float v, uint16_t* p) { *p = FloatToBFloat16(v); }
inline void Put(Vec v, uint16_t* p) {
  UintVec bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const HalfVec half = __builtin_convertvector(bits, HalfVec);
  std::memcpy(p, &half, sizeof half);
}

// f(i, Vec{}) for i = 0, kLanes, 2 kLanes, ... while a whole vector fits
// below n, then f(i, 0.0f) for each i left: a loop body written once (a
// generic lambda) for vectors and the scalar tail.
template <typename F>
inline void ForEachVector(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) f(i, Vec{});
  for (; i < n; ++i) f(i, 0.0f);
}

// The same split over the OpenMP pool's threads (vectors in contiguous
// runs per thread; the tail on one).
template <typename F>
inline void ParallelForEachVector(int64_t n, F&& f) {
  const int64_t vectors = n / kLanes;
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < vectors; ++v) f(v * kLanes, Vec{});
  for (int64_t i = vectors * kLanes; i < n; ++i) f(i, 0.0f);
}

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_SIMD_H_
