// Row normalisations: rmsnorm, gated rmsnorm, silu with grouped L2 norm,
// weight norm.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/traffic.h"

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

// Block (r, g) of a grid (rows, groups + 1): silu of group g of row r, L2
// normed; block (r, groups) the silu of the columns after the groups.
__global__ void SiluL2NormKernel(float* x, int64_t ldx, int64_t cols, int64_t groups, int64_t group,
                                 __nv_bfloat16* x16) {
  const int64_t first = blockIdx.y * group, row = blockIdx.x * ldx;
  float* v = x + row + first;
  __nv_bfloat16* v16 = x16 != nullptr ? x16 + row + first : nullptr;
  if (blockIdx.y == groups) {
    for (int64_t i = threadIdx.x; i < cols - first; i += blockDim.x) {
      const float s = DeviceSilu(v[i]);
      v[i] = s;
      if (v16 != nullptr) v16[i] = __float2bfloat16_rn(s);
    }
    return;
  }
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float s = DeviceSilu(v[i]);
    v[i] = s;
    ss += s * s;
  }
  const float inv = 1.0f / (sqrtf(BlockSum(ss)) + 1e-5f);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float s = v[i] * inv;
    v[i] = s;
    if (v16 != nullptr) v16[i] = __float2bfloat16_rn(s);
  }
}

__global__ void WeightNormKernel(float* w, const float* dw, const float* w_init, int64_t cols,
                                 __nv_bfloat16* w16) {
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
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = wr[c] * scale;
    wr[c] = v;
    if (w16 != nullptr) w16[blockIdx.x * cols + c] = __float2bfloat16_rn(v);
  }
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
  NoteLaunch("NormalizeMatrices", 4 * batch * size, 4 * batch * size);
  return LaunchStatus("NormalizeMatrices");
}

absl::Status RmsNormRows(cudaStream_t s, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                         const float* w, float* y, int64_t ldy, __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  // x is only read without `add`.
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(const_cast<float*>(x), ldx,
                                                                 nullptr, 0, cols, w, y, ldy, y16);
  NoteLaunch("RmsNormRows", 4 * (rows * cols + cols), (y16 != nullptr ? 6 : 4) * rows * cols);
  return LaunchStatus("RmsNormRows");
}

absl::Status AddRmsNormRows(cudaStream_t s, float* x, int64_t ldx, const float* add, int64_t ldadd,
                            int64_t rows, int64_t cols, const float* w, float* y, int64_t ldy,
                            __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, ldx, add, ldadd, cols, w, y,
                                                                 ldy, y16);
  NoteLaunch("AddRmsNormRows", 4 * (2 * rows * cols + cols),
             (y16 != nullptr ? 10 : 8) * rows * cols);
  return LaunchStatus("AddRmsNormRows");
}

absl::Status GatedRmsNormRows(cudaStream_t s, float* y, int64_t ldy, const float* z, int64_t ldz,
                              int64_t rows, int64_t cols, const float* w, __nv_bfloat16* y16) {
  if (rows == 0) return absl::OkStatus();
  GatedRmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(y, ldy, z, ldz, cols, w, y16);
  NoteLaunch("GatedRmsNormRows", 4 * (2 * rows * cols + cols),
             (y16 != nullptr ? 6 : 4) * rows * cols);
  return LaunchStatus("GatedRmsNormRows");
}

absl::Status GatedRmsNormRowsBf16(cudaStream_t s, __nv_bfloat16* y, int64_t ldy, const float* z,
                                  int64_t ldz, int64_t rows, int64_t cols, const float* w) {
  if (rows == 0) return absl::OkStatus();
  GatedRmsNormBf16Kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(y, ldy, z, ldz, cols, w);
  NoteLaunch("GatedRmsNormRowsBf16", 6 * rows * cols + 4 * cols, 2 * rows * cols);
  return LaunchStatus("GatedRmsNormRowsBf16");
}

absl::Status SiluL2NormGroups(cudaStream_t s, float* x, int64_t ldx, int64_t rows, int64_t cols,
                              int64_t groups, int64_t group, __nv_bfloat16* x16) {
  if (groups < 0 || group < 1 || groups * group > cols || groups >= 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("SiluL2NormGroups: need 0 <= groups < 65535, group >= 1 and groups * group ",
                     "<= cols; got ", groups, " groups of ", group, " in ", cols, " columns"));
  }
  if (rows == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(groups + 1));
  SiluL2NormKernel<<<grid, 128, 0, s>>>(x, ldx, cols, groups, group, x16);
  NoteLaunch("SiluL2NormGroups", 4 * rows * cols, (x16 != nullptr ? 6 : 4) * rows * cols);
  return LaunchStatus("SiluL2NormGroups");
}

absl::Status WeightNormUpdate(cudaStream_t s, float* w, const float* dw, const float* w_init,
                              int64_t rows, int64_t cols, __nv_bfloat16* w16) {
  if (rows == 0) return absl::OkStatus();
  WeightNormKernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(w, dw, w_init, cols, w16);
  NoteLaunch("WeightNormUpdate", 12 * rows * cols, (w16 != nullptr ? 6 : 4) * rows * cols);
  return LaunchStatus("WeightNormUpdate");
}

}  // namespace lact::cuda
