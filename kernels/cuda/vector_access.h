// Up to eight consecutive elements of a float32 or bf16 array moved as
// float32 (device code only), with 16-byte accesses where all eight are
// wanted and the address is 16-byte aligned (one access for eight bf16, two
// for eight floats), element by element otherwise. The memory-bound passes
// walk their rows eight elements a thread, so a warp moves 256 or 512
// contiguous bytes an instruction:
//
//   for (int64_t c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
//     const int n = Count8(c, cols);
//     float v[8];
//     Load8(row + c, n, v);  // v[n..8) = 0
//     ...
//     Store8(row + c, n, v);  // writes v[0..n) only
//   }
#ifndef LACT_KERNELS_CUDA_VECTOR_ACCESS_H_
#define LACT_KERNELS_CUDA_VECTOR_ACCESS_H_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace lact::cuda {

// How many of the eight elements from column c of `cols` exist.
__device__ inline int Count8(int64_t c, int64_t cols) {
  return cols - c >= 8 ? 8 : static_cast<int>(cols - c);
}

__device__ inline bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

__device__ inline void Load8(const float* p, int count, float (&v)[8]) {
  if (count == 8 && Aligned16(p)) {
    const uint4 lo = *reinterpret_cast<const uint4*>(p);
    const uint4 hi = *reinterpret_cast<const uint4*>(p + 4);
    const unsigned bits[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __uint_as_float(bits[i]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = i < count ? p[i] : 0.0f;
}

__device__ inline void Load8(const __nv_bfloat16* p, int count, float (&v)[8]) {
  if (count == 8 && Aligned16(p)) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = i < count ? __bfloat162float(p[i]) : 0.0f;
}

__device__ inline void Store8(float* p, int count, const float (&v)[8]) {
  if (count == 8 && Aligned16(p)) {
    uint4 lo, hi;
    lo.x = __float_as_uint(v[0]);
    lo.y = __float_as_uint(v[1]);
    lo.z = __float_as_uint(v[2]);
    lo.w = __float_as_uint(v[3]);
    hi.x = __float_as_uint(v[4]);
    hi.y = __float_as_uint(v[5]);
    hi.z = __float_as_uint(v[6]);
    hi.w = __float_as_uint(v[7]);
    *reinterpret_cast<uint4*>(p) = lo;
    *reinterpret_cast<uint4*>(p + 4) = hi;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) p[i] = v[i];
  }
}

// The bits of bf16(v), rounded to nearest even.
__device__ inline unsigned Bf16Bits(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ inline void Store8(__nv_bfloat16* p, int count, const float (&v)[8]) {
  if (count == 8 && Aligned16(p)) {
    uint4 raw;
    raw.x = Bf16Bits(v[0]) | (Bf16Bits(v[1]) << 16);
    raw.y = Bf16Bits(v[2]) | (Bf16Bits(v[3]) << 16);
    raw.z = Bf16Bits(v[4]) | (Bf16Bits(v[5]) << 16);
    raw.w = Bf16Bits(v[6]) | (Bf16Bits(v[7]) << 16);
    *reinterpret_cast<uint4*>(p) = raw;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i < count) p[i] = __float2bfloat16_rn(v[i]);
  }
}

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_VECTOR_ACCESS_H_
