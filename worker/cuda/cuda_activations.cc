#include "worker/cuda/cuda_activations.h"

#include "common/status_macros.h"

namespace lact {

float* CudaActivations::NormedF32(int64_t first) const {
  return h16.get() != nullptr ? nullptr : h.get() + first * width;
}

__nv_bfloat16* CudaActivations::NormedBf16(int64_t first) const {
  return h16.get() == nullptr ? nullptr : Bf16(h16) + first * width;
}

absl::Status TileValues::Allocate(cuda::Precision precision, int64_t count) {
  bf16_ = precision == cuda::Precision::kBf16;
  const int64_t floats = bf16_ ? (count + 1) / 2 : count;
  LACT_ASSIGN_OR_RETURN(buffer_, cuda::DeviceBuffer::Allocate(static_cast<size_t>(floats)));
  return absl::OkStatus();
}

cuda::Values TileValues::at(int64_t offset) const {
  if (buffer_.get() == nullptr) return {};
  return bf16_ ? cuda::Values(Bf16(buffer_) + offset) : cuda::Values(buffer_.get() + offset);
}

absl::Status AllocateTiles(cuda::Precision precision,
                           std::initializer_list<std::pair<TileValues*, int64_t>> plan) {
  for (const auto& [tile, count] : plan) LACT_RETURN_IF_ERROR(tile->Allocate(precision, count));
  return absl::OkStatus();
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
