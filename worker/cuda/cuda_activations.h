// What the CUDA ops' parts (cuda_ops.h) share: the shard's rows on the
// device, [L, D] each, for the whole sequence: the residual stream x, the
// block's normed input h (with its bf16 rounding h16, made by the norm that
// writes h, in bf16 precision) and acc, where the block's mixer and LaCT
// outputs add up; what each part works with (CudaPart); and how a part
// hands its GEMMs their inputs. The
// precision policy is the context's (cuda::CudaContext::precision()): in
// bf16 precision the bf16 roundings exist and every GEMM reads them; in
// fp32 they are null and the GEMMs read float32.
#ifndef LACT_WORKER_CUDA_CUDA_ACTIVATIONS_H_
#define LACT_WORKER_CUDA_CUDA_ACTIVATIONS_H_

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "worker/cuda/device_weights.h"

namespace lact {

struct CudaActivations {
  cuda::DeviceBuffer x, h, acc;  // [L, D]
  cuda::DeviceBuffer h16;        // h rounded to bf16 (bf16 precision only)
  int64_t width = 0;             // D

  // h's rows from `first` as a GEMM input, with their bf16 rounding.
  cuda::GemmInput NormedRows(int64_t first) const {
    return {h.get() + first * width, NormedBf16(first)};
  }
  // Where that rounding of h's rows from `first` goes (null in fp32).
  __nv_bfloat16* NormedBf16(int64_t first) const;
};

// What each part works with: the job's config, the device context, the
// model's weights on it and the shared rows; all outlive the part.
class CudaPart {
 public:
  CudaPart(const ModelConfig& c, cuda::CudaContext& ctx, const DeviceWeights& weights,
           CudaActivations& rows)
      : c_(c), ctx_(ctx), weights_(weights), rows_(rows) {}

 protected:
  cudaStream_t stream() const { return ctx_.stream(); }

  const ModelConfig& c_;
  cuda::CudaContext& ctx_;
  const DeviceWeights& weights_;
  CudaActivations& rows_;
};

// A bf16 rounding buffer from its start, as bf16 (null when not made).
inline __nv_bfloat16* Bf16(const cuda::DeviceBuffer& b) {
  return reinterpret_cast<__nv_bfloat16*>(b.get());
}

// Allocates each buffer of `plan` with its count of floats.
absl::Status AllocateFloats(std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan);
// In bf16 precision, each buffer of `plan` with room for its count of bf16
// values; in fp32 none (they stay null).
absl::Status AllocateBf16(cuda::Precision precision,
                          std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan);

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_ACTIVATIONS_H_
