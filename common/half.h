// IEEE binary16 and bfloat16 to float32 conversion (exact), and float32 to
// binary16 with round-to-nearest-even (for writing .npy float16).
#ifndef LACT_COMMON_HALF_H_
#define LACT_COMMON_HALF_H_

#include <cstdint>

namespace lact {

float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToHalf(float f);

}  // namespace lact

#endif  // LACT_COMMON_HALF_H_
