// Causal depthwise conv + silu over a segment, with W-1 history rows.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/traffic.h"
#include "kernels/cuda/vector_access.h"

namespace lact::cuda {
namespace {

// One block per token row t, eight channels a thread (vector_access.h).
template <class TU, class TO>
__global__ void ConvKernel(const TU* u, int64_t ldu, int64_t channels, int width,
                           const float* weight, const float* bias, const float* history, TO* out,
                           int64_t ldo) {
  const int64_t t = blockIdx.x;
  for (int64_t c = 8 * threadIdx.x; c < channels; c += 8 * blockDim.x) {
    const int n = Count8(c, channels);
    float acc[8], v[8];
    Load8(bias + c, n, acc);
    for (int j = 0; j < width; ++j) {
      const int64_t src = t - (width - 1) + j;
      if (src >= 0) {
        Load8(u + src * ldu + c, n, v);
      } else {
        Load8(history + (width - 1 + src) * channels + c, n, v);
      }
      for (int k = 0; k < 8; ++k) {
        if (k < n) acc[k] += weight[(c + k) * width + j] * v[k];
      }
    }
    for (int k = 0; k < 8; ++k) acc[k] = DeviceSilu(acc[k]);
    Store8(out + t * ldo + c, n, acc);
  }
}

// next = last W-1 rows of (history ++ u), one block per row.
template <class TU>
__global__ void HistoryKernel(const TU* u, int64_t ldu, int64_t tokens, int64_t channels, int keep,
                              const float* history, float* next) {
  const int64_t r = blockIdx.x, src = tokens + r;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    next[r * channels + c] =
        src < keep ? history[src * channels + c] : Load(u[(src - keep) * ldu + c]);
  }
}

template <class TU, class TO>
void LaunchConv(cudaStream_t s, const TU* u, int64_t ldu, int64_t tokens, int64_t channels,
                int width, const float* weight, const float* bias, const float* history, TO* out,
                int64_t ldo) {
  auto* const kernel = ConvKernel<TU, TO>;
  kernel<<<static_cast<unsigned>(tokens), RowThreads(channels), 0, s>>>(
      u, ldu, channels, width, weight, bias, history, out, ldo);
}

template <class TU>
void LaunchConv(cudaStream_t s, const TU* u, int64_t ldu, int64_t tokens, int64_t channels,
                int width, const float* weight, const float* bias, const float* history, Values out,
                int64_t ldo) {
  if (out.is_bf16()) {
    LaunchConv(s, u, ldu, tokens, channels, width, weight, bias, history, out.bf16, ldo);
  } else {
    LaunchConv(s, u, ldu, tokens, channels, width, weight, bias, history, out.f32, ldo);
  }
}

template <class TU>
void LaunchHistory(cudaStream_t s, const TU* u, int64_t ldu, int64_t tokens, int64_t channels,
                   int keep, const float* history, float* next) {
  auto* const kernel = HistoryKernel<TU>;
  kernel<<<static_cast<unsigned>(keep), kThreads, 0, s>>>(u, ldu, tokens, channels, keep, history,
                                                          next);
}

}  // namespace

absl::Status ConvSilu(cudaStream_t s, ConstValues u, int64_t ldu, int64_t tokens, int64_t channels,
                      int width, const float* weight, const float* bias, float* history,
                      float* scratch, Values out, int64_t ldo) {
  if (tokens > kMaxRowBlocks) return TooManyRows("ConvSilu", tokens);
  if (tokens > 0) {
    if (u.is_bf16()) {
      LaunchConv(s, u.bf16, ldu, tokens, channels, width, weight, bias, history, out, ldo);
    } else {
      LaunchConv(s, u.f32, ldu, tokens, channels, width, weight, bias, history, out, ldo);
    }
    // The rows, the width weights, the bias and the width - 1 history rows.
    NoteLaunch("ConvSilu", u.element_bytes() * tokens * channels + 4 * 2 * width * channels,
               out.element_bytes() * tokens * channels);
  }
  const int keep = width - 1;
  if (keep > 0) {
    if (u.is_bf16()) {
      LaunchHistory(s, u.bf16, ldu, tokens, channels, keep, history, scratch);
    } else {
      LaunchHistory(s, u.f32, ldu, tokens, channels, keep, history, scratch);
    }
    NoteLaunch("ConvSilu history", 4 * keep * channels, 4 * keep * channels);
    const cudaError_t copied = cudaMemcpyAsync(history, scratch, keep * channels * sizeof(float),
                                               cudaMemcpyDeviceToDevice, s);
    if (copied != cudaSuccess)
      return absl::InternalError(absl::StrCat("ConvSilu history: ", cudaGetErrorString(copied)));
  }
  return LaunchStatus("ConvSilu");
}

}  // namespace lact::cuda
