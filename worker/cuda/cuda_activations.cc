#include "worker/cuda/cuda_activations.h"

#include "common/status_macros.h"

namespace lact {

__nv_bfloat16* CudaActivations::NormedBf16(int64_t first) const {
  return h16.get() == nullptr ? nullptr : Bf16(h16) + first * width;
}

absl::Status AllocateFloats(std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan) {
  for (const auto& [buffer, floats] : plan) {
    LACT_ASSIGN_OR_RETURN(*buffer, cuda::DeviceBuffer::Allocate(static_cast<size_t>(floats)));
  }
  return absl::OkStatus();
}

absl::Status AllocateBf16(cuda::Precision precision,
                          std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan) {
  if (precision != cuda::Precision::kBf16) return absl::OkStatus();
  for (const auto& [buffer, values] : plan) {
    LACT_ASSIGN_OR_RETURN(*buffer,
                          cuda::DeviceBuffer::Allocate(static_cast<size_t>((values + 1) / 2)));
  }
  return absl::OkStatus();
}

}  // namespace lact
