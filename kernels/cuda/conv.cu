// Causal depthwise conv + silu over a segment, with W-1 history rows.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

__global__ void ConvKernel(const float* u, int64_t ldu, int64_t tokens, int64_t channels, int width,
                           const float* weight, const float* bias, const float* history, float* out,
                           int64_t ldo, __nv_bfloat16* out16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= tokens * channels) return;
  const int64_t t = i / channels, c = i % channels;
  float acc = bias[c];
  for (int j = 0; j < width; ++j) {
    const int64_t src = t - (width - 1) + j;
    const float v = src >= 0 ? u[src * ldu + c] : history[(width - 1 + src) * channels + c];
    acc += weight[c * width + j] * v;
  }
  if (out16 != nullptr) {
    out16[t * ldo + c] = __float2bfloat16_rn(DeviceSilu(acc));
  } else {
    out[t * ldo + c] = DeviceSilu(acc);
  }
}

// next = last W-1 rows of (history ++ u).
__global__ void HistoryKernel(const float* u, int64_t ldu, int64_t tokens, int64_t channels,
                              int keep, const float* history, float* next) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= keep * channels) return;
  const int64_t r = i / channels, c = i % channels, src = tokens + r;
  next[i] = src < keep ? history[src * channels + c] : u[(src - keep) * ldu + c];
}

}  // namespace

absl::Status ConvSilu(cudaStream_t s, const float* u, int64_t ldu, int64_t tokens, int64_t channels,
                      int width, const float* weight, const float* bias, float* history,
                      float* scratch, float* out, int64_t ldo, __nv_bfloat16* out16) {
  if ((out == nullptr) == (out16 == nullptr))
    return absl::InvalidArgumentError("ConvSilu: give exactly one of out and out16");
  if (tokens > 0) {
    ConvKernel<<<Blocks(tokens * channels), kThreads, 0, s>>>(
        u, ldu, tokens, channels, width, weight, bias, history, out, ldo, out16);
    // The rows, the width weights, the bias and the width - 1 history rows.
    NoteLaunch("ConvSilu", 4 * (tokens + 2 * width) * channels,
               (out16 != nullptr ? 2 : 4) * tokens * channels);
  }
  const int keep = width - 1;
  if (keep > 0) {
    HistoryKernel<<<Blocks(keep * channels), kThreads, 0, s>>>(u, ldu, tokens, channels, keep,
                                                               history, scratch);
    NoteLaunch("ConvSilu history", 4 * keep * channels, 4 * keep * channels);
    const cudaError_t copied = cudaMemcpyAsync(history, scratch, keep * channels * sizeof(float),
                                               cudaMemcpyDeviceToDevice, s);
    if (copied != cudaSuccess)
      return absl::InternalError(absl::StrCat("ConvSilu history: ", cudaGetErrorString(copied)));
  }
  return LaunchStatus("ConvSilu");
}

}  // namespace lact::cuda
