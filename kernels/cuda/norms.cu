// Row normalisations: rmsnorm, gated rmsnorm, grouped L2 norm, weight norm.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace lact::cuda {
namespace {

// One block per row: x[r] += add[r] first when `add` is given (x written
// back), then y[r] = rmsnorm(x[r]) * w, and y16[r] its bf16 rounding when
// `y16` is given (same row stride as y).
__global__ void RmsNormKernel(float* x, int64_t ldx, const float* add, int64_t ldadd, int64_t cols,
                              const float* w, float* y, int64_t ldy, __nv_bfloat16* y16) {
  float* xr = x + blockIdx.x * ldx;
  float* yr = y + blockIdx.x * ldy;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = xr[c];
    if (add != nullptr) {
      v += add[blockIdx.x * ldadd + c];
      xr[c] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = xr[c] * inv * w[c];
    yr[c] = v;
    if (y16 != nullptr) y16[blockIdx.x * ldy + c] = __float2bfloat16_rn(v);
  }
}

__global__ void GatedRmsNormKernel(float* y, int64_t ldy, const float* z, int64_t ldz, int64_t cols,
                                   const float* w, __nv_bfloat16* y16) {
  float* yr = y + blockIdx.x * ldy;
  const float* zr = z + blockIdx.x * ldz;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = yr[c] * DeviceSilu(zr[c]);
    yr[c] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = yr[c] * (inv * w[c]);
    yr[c] = v;
    if (y16 != nullptr) y16[blockIdx.x * ldy + c] = __float2bfloat16_rn(v);
  }
}

// GatedRmsNormKernel on bf16 rows in place: the gated values are formed
// twice (for the sum of squares, then for the output) rather than stored.
__global__ void GatedRmsNormBf16Kernel(__nv_bfloat16* y, int64_t ldy, const float* z, int64_t ldz,
                                       int64_t cols, const float* w) {
  __nv_bfloat16* yr = y + blockIdx.x * ldy;
  const float* zr = z + blockIdx.x * ldz;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(yr[c]) * DeviceSilu(zr[c]);
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(yr[c]) * DeviceSilu(zr[c]);
    yr[c] = __float2bfloat16_rn(v * (inv * w[c]));
  }
}

// One block per (row, group).
__global__ void L2NormKernel(float* x, int64_t ldx, int64_t groups, int64_t group) {
  float* v = x + (blockIdx.x / groups) * ldx + (blockIdx.x % groups) * group;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += v[i] * v[i];
  const float inv = 1.0f / (sqrtf(BlockSum(ss)) + 1e-5f);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) v[i] *= inv;
}

__global__ void WeightNormKernel(float* w, const float* dw, const float* w_init, int64_t cols) {
  float* wr = w + blockIdx.x * cols;
  const float* dr = dw + blockIdx.x * cols;
  const float* ir = w_init + blockIdx.x * cols;
  float ss = 0.0f, ss0 = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = wr[c] + dr[c];
    wr[c] = v;
    ss += v * v;
    ss0 += ir[c] * ir[c];
  }
  const float n = sqrtf(BlockSum(ss)), n0 = sqrtf(BlockSum(ss0));
  const float scale = n0 / (n + 1e-5f);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) wr[c] *= scale;
}

__global__ void NormalizeMatrixKernel(float* x, int64_t size) {
  float* m = x + blockIdx.x * size;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) ss += m[i] * m[i];
  const float inv = 1.0f / (sqrtf(BlockSum(ss)) + 1e-7f);
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) m[i] *= inv;
}

}  // namespace

absl::Status NormalizeMatrices(cudaStream_t s, float* x, int64_t batch, int64_t size) {
  if (batch == 0) return absl::OkStatus();
  NormalizeMatrixKernel<<<static_cast<unsigned>(batch), kThreads, 0, s>>>(x, size);
  return LaunchStatus("NormalizeMatrices");
}

absl::Status RmsNormRows(cudaStream_t s, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                         const float* w, float* y, int64_t ldy, __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  // x is only read without `add`.
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(const_cast<float*>(x), ldx,
                                                                 nullptr, 0, cols, w, y, ldy, y16);
  return LaunchStatus("RmsNormRows");
}

absl::Status AddRmsNormRows(cudaStream_t s, float* x, int64_t ldx, const float* add, int64_t ldadd,
                            int64_t rows, int64_t cols, const float* w, float* y, int64_t ldy,
                            __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, ldx, add, ldadd, cols, w, y,
                                                                 ldy, y16);
  return LaunchStatus("AddRmsNormRows");
}

absl::Status GatedRmsNormRows(cudaStream_t s, float* y, int64_t ldy, const float* z, int64_t ldz,
                              int64_t rows, int64_t cols, const float* w, __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  GatedRmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(y, ldy, z, ldz, cols, w, y16);
  return LaunchStatus("GatedRmsNormRows");
}

absl::Status GatedRmsNormRowsBf16(cudaStream_t s, __nv_bfloat16* y, int64_t ldy, const float* z,
                                  int64_t ldz, int64_t rows, int64_t cols, const float* w) {
  if (rows == 0) return absl::OkStatus();
  GatedRmsNormBf16Kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(y, ldy, z, ldz, cols, w);
  return LaunchStatus("GatedRmsNormRowsBf16");
}

absl::Status L2NormGroups(cudaStream_t s, float* x, int64_t ldx, int64_t rows, int64_t groups,
                          int64_t group) {
  if (rows == 0) return absl::OkStatus();
  L2NormKernel<<<static_cast<unsigned>(rows * groups), 128, 0, s>>>(x, ldx, groups, group);
  return LaunchStatus("L2NormGroups");
}

absl::Status WeightNormUpdate(cudaStream_t s, float* w, const float* dw, const float* w_init,
                              int64_t rows, int64_t cols) {
  if (rows == 0) return absl::OkStatus();
  WeightNormKernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(w, dw, w_init, cols);
  return LaunchStatus("WeightNormUpdate");
}

}  // namespace lact::cuda
