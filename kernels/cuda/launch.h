// Launch helpers shared by the .cu files (device code only).
#ifndef LACT_KERNELS_CUDA_LAUNCH_H_
#define LACT_KERNELS_CUDA_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/values.h"

namespace lact::cuda {

inline constexpr int kThreads = 256;

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Threads for a block that walks a row of `cols` values eight a thread
// (vector_access.h): whole warps, at most kThreads.
inline unsigned RowThreads(int64_t cols) {
  const int64_t warps = (cols + 255) / 256;
  return static_cast<unsigned>(warps >= kThreads / 32 ? kThreads : (warps < 1 ? 32 : 32 * warps));
}

// The most blocks of a one-dimensional grid: the row-wise kernels' limit on
// rows (one block per row).
inline constexpr int64_t kMaxRowBlocks = 2147483647;

inline absl::Status TooManyRows(const char* what, int64_t rows) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", rows, " rows; at most ", kMaxRowBlocks, " (one block per row)"));
}

inline absl::Status LaunchStatus(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
  return absl::OkStatus();
}

// INVALID_ARGUMENT naming `what` unless every array of `arrays` has the
// element type of the first.
inline absl::Status SameElementType(const char* what, std::initializer_list<ConstValues> arrays) {
  for (const ConstValues& a : arrays) {
    if (a.is_bf16() != arrays.begin()->is_bf16()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": its arrays must be all float32 or all bf16"));
    }
  }
  return absl::OkStatus();
}

// An element of a float32 or bf16 array read as float32, and a float32
// value written as one (bf16: rounded to nearest even).
__device__ inline float Load(float v) { return v; }
__device__ inline float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline void Store(float* p, float v) { *p = v; }
__device__ inline void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

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
