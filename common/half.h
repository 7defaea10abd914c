// IEEE binary16 and bfloat16 to float32 conversion (exact), and float32 to
// binary16 and bfloat16 with round-to-nearest-even (for .npy float16, the
// bf16 wire dtype and the CPU's bf16 GEMM operands).
#ifndef LACT_COMMON_HALF_H_
#define LACT_COMMON_HALF_H_

#include <bit>
#include <cstdint>

namespace lact {

float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToHalf(float f);

// float32 -> bfloat16, round to nearest, ties to even, as a float32 whose
// low 16 bits are zero. Finite inputs (a NaN's payload may carry it to
// infinity); inline and branch-free, so loops calling it vectorise.
inline float RoundToBFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return std::bit_cast<float>((bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u);
}

// The same, as the bfloat16's 16 bits.
inline uint16_t FloatToBFloat16(float f) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(RoundToBFloat16(f)) >> 16);
}

}  // namespace lact

#endif  // LACT_COMMON_HALF_H_
