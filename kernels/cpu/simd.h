// One vector register of floats as a GCC vector type, for the kernels that
// keep their blocks in registers (SmallGemm, the SSD scan's chunk masks):
// 16 lanes with AVX-512, 8 otherwise. Arithmetic, comparisons (lane masks
// of IntVec) and ?: work lane-wise; a scalar operand is broadcast.
#ifndef LACT_KERNELS_CPU_SIMD_H_
#define LACT_KERNELS_CPU_SIMD_H_

#include <cstdint>
#include <cstring>

namespace lact::cpu {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#else
inline constexpr int kLanes = 8;
#endif

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t IntVec __attribute__((vector_size(kLanes * sizeof(int32_t))));

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

// 2^n for integral n in [-126, 127] (FastExp's scaling), lane-wise.
inline Vec Pow2(Vec n) {
  const IntVec bits = (__builtin_convertvector(n, IntVec) + 127) << 23;
  Vec out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_SIMD_H_
