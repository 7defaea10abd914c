// A device array whose element type is chosen at run time: float32, or
// bf16 (half the bytes). A tile's intermediates (a GEMM's output read by
// the next kernel or GEMM) are float32 in fp32 precision and bf16 in bf16
// precision; the kernels and GEMMs that take these types run on either,
// computing in float32 whatever they read or write.
//
// Exactly one of the two pointers is set (both null: no array).
#ifndef LACT_KERNELS_CUDA_VALUES_H_
#define LACT_KERNELS_CUDA_VALUES_H_

#include <cuda_bf16.h>

#include <cstdint>

namespace lact::cuda {

struct Values {
  Values() = default;
  Values(float* values) : f32(values) {}           // NOLINT(runtime/explicit)
  Values(__nv_bfloat16* values) : bf16(values) {}  // NOLINT(runtime/explicit)
  float* f32 = nullptr;
  __nv_bfloat16* bf16 = nullptr;

  bool is_bf16() const { return bf16 != nullptr; }
  // Bytes per element: 4 or 2.
  int64_t element_bytes() const { return is_bf16() ? 2 : 4; }
  // The same array from `n` elements further on.
  Values Offset(int64_t n) const {
    return bf16 != nullptr ? Values(bf16 + n) : Values(f32 != nullptr ? f32 + n : nullptr);
  }
};

// The read-only form of Values.
struct ConstValues {
  ConstValues() = default;
  ConstValues(const float* values) : f32(values) {}           // NOLINT(runtime/explicit)
  ConstValues(const __nv_bfloat16* values) : bf16(values) {}  // NOLINT(runtime/explicit)
  ConstValues(const Values& v) : f32(v.f32), bf16(v.bf16) {}  // NOLINT(runtime/explicit)
  const float* f32 = nullptr;
  const __nv_bfloat16* bf16 = nullptr;

  bool is_bf16() const { return bf16 != nullptr; }
  int64_t element_bytes() const { return is_bf16() ? 2 : 4; }
  ConstValues Offset(int64_t n) const {
    return bf16 != nullptr ? ConstValues(bf16 + n)
                           : ConstValues(f32 != nullptr ? f32 + n : nullptr);
  }
};

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_VALUES_H_
