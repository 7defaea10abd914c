// Launch helpers shared by the .cu files (device code only).
#ifndef LACT_KERNELS_CUDA_LAUNCH_H_
#define LACT_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lact::cuda {

inline constexpr int kThreads = 256;

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

inline absl::Status LaunchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
  return absl::OkStatus();
}

__device__ inline float DeviceSilu(float x) { return x / (1.0f + expf(-x)); }
__device__ inline float DeviceSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ inline float BlockSum(float v) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = threadIdx.x < warps ? partial[threadIdx.x] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float total = partial[0];
  __syncthreads();
  return total;
}

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_LAUNCH_H_
