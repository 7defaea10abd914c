// What the CUDA ops' parts (cuda_ops.h) share: the shard's rows on the
// device, [L, D] each, for the whole sequence: the residual stream x, the
// block's normed input h and acc, where the block's mixer and LaCT outputs
// add up; what each part works with (CudaPart); and how a part hands its
// GEMMs their inputs. The precision policy is the context's
// (cuda::CudaContext::precision()): in fp32 every GEMM reads float32; in
// bf16 the norms write h as its bf16 rounding h16 alone (h then holds only
// the final norm's float32 output rows), the tiles' intermediates are bf16
// (TileValues) and every GEMM reads bf16.
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

  // h's rows from `first` as a GEMM input: float32 in fp32 precision,
  // their bf16 rounding in bf16.
  cuda::GemmInput NormedRows(int64_t first) const { return {NormedF32(first), NormedBf16(first)}; }
  // Where a block's norm writes h's rows from `first`: float32 in fp32
  // precision (the bf16 rounding null), only the rounding in bf16 (the
  // float32 rows null), the one the GEMMs read.
  float* NormedF32(int64_t first) const;
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

// A tile's intermediate (a GEMM's output read by the next kernel or GEMM)
// in the context's precision: float32 in fp32, bf16 in bf16, half the
// bytes (kernels/cuda/values.h).
class TileValues {
 public:
  absl::Status Allocate(cuda::Precision precision, int64_t count);
  // The values from element `offset` on.
  cuda::Values at(int64_t offset = 0) const;

 private:
  cuda::DeviceBuffer buffer_;
  bool bf16_ = false;
};

// Allocates each of `plan` with its count of values.
absl::Status AllocateTiles(cuda::Precision precision,
                           std::initializer_list<std::pair<TileValues*, int64_t>> plan);

// Allocates each buffer of `plan` with its count of floats.
absl::Status AllocateFloats(std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan);
// In bf16 precision, each buffer of `plan` with room for its count of bf16
// values; in fp32 none (they stay null).
absl::Status AllocateBf16(cuda::Precision precision,
                          std::initializer_list<std::pair<cuda::DeviceBuffer*, int64_t>> plan);

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_ACTIVATIONS_H_
