// Row normalisations: rmsnorm, gated rmsnorm, silu with grouped L2 norm,
// weight norm.
#include <algorithm>

#include "common/status_macros.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/traffic.h"
#include "kernels/cuda/vector_access.h"

namespace lact::cuda {
namespace {

// One block per row: x[r] += add[r] first when `add` is given (x written
// back; float32 only), then y[r] = rmsnorm(x[r]) * w when `y` is given,
// and y16[r] its bf16 rounding when `y16` is (same row stride as y). Eight
// columns a thread (vector_access.h).
template <class T>
__global__ void RmsNormKernel(T* x, int64_t ldx, const float* add, int64_t ldadd, int64_t cols,
                              const float* w, T* y, int64_t ldy, __nv_bfloat16* y16) {
  T* xr = x + blockIdx.x * ldx;
  float ss = 0.0f;
  for (int64_t c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
    const int n = Count8(c, cols);
    float v[8];
    Load8(xr + c, n, v);
    if (add != nullptr) {
      float a[8];
      Load8(add + blockIdx.x * ldadd + c, n, a);
      for (int i = 0; i < 8; ++i) v[i] += a[i];
      Store8(xr + c, n, v);
    }
    for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
    const int n = Count8(c, cols);
    float v[8], wv[8];
    Load8(xr + c, n, v);
    Load8(w + c, n, wv);
    for (int i = 0; i < 8; ++i) v[i] *= inv * wv[i];
    if (y != nullptr) Store8(y + blockIdx.x * ldy + c, n, v);
    if (y16 != nullptr) Store8(y16 + blockIdx.x * ldy + c, n, v);
  }
}

// y[r] = rmsnorm(y[r] * silu(z[r]), w) in place, or into o.out alone when
// it is given (plus o.held's row, both rounded to bf16 first, when that is
// given): the gated values are formed twice (for the sum of squares, then
// for the output) rather than stored.
template <class TY, class TZ>
__global__ void GatedRmsNormKernel(TY* y, int64_t ldy, const TZ* z, int64_t ldz, int64_t cols,
                                   const float* w, GatedNormOutput o) {
  TY* yr = y + blockIdx.x * ldy;
  const TZ* zr = z + blockIdx.x * ldz;
  float ss = 0.0f;
  for (int64_t c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
    const int n = Count8(c, cols);
    float v[8], g[8];
    Load8(yr + c, n, v);
    Load8(zr + c, n, g);
    for (int i = 0; i < 8; ++i) {
      const float gated = v[i] * DeviceSilu(g[i]);
      ss += gated * gated;
    }
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
    const int n = Count8(c, cols);
    float v[8], g[8], wv[8];
    Load8(yr + c, n, v);
    Load8(zr + c, n, g);
    Load8(w + c, n, wv);
    for (int i = 0; i < 8; ++i) v[i] *= DeviceSilu(g[i]) * (inv * wv[i]);
    if (o.out == nullptr) {
      Store8(yr + c, n, v);
      continue;
    }
    if (o.held != nullptr) {
      float h[8];
      Load8(o.held + blockIdx.x * o.ldheld + c, n, h);
      for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(v[i])) + h[i];
    }
    Store8(o.out + blockIdx.x * o.ldo + c, n, v);
  }
}

// Block (r, g) of a grid (rows, groups + 1): silu of group g of row r, L2
// normed; block (r, groups) the silu of the columns after the groups.
template <class T>
__global__ void SiluL2NormKernel(T* x, int64_t ldx, int64_t cols, int64_t groups, int64_t group) {
  const int64_t first = blockIdx.y * group;
  T* row = x + blockIdx.x * ldx + first;
  const int64_t count = blockIdx.y == groups ? cols - first : group;
  float inv = 1.0f;  // the columns after the groups are not normed
  if (blockIdx.y != groups) {
    float ss = 0.0f;
    for (int64_t c = 8 * threadIdx.x; c < count; c += 8 * blockDim.x) {
      const int n = Count8(c, count);
      float v[8];
      Load8(row + c, n, v);
      for (int i = 0; i < 8; ++i) {
        const float s = DeviceSilu(v[i]);
        ss += s * s;
      }
    }
    inv = 1.0f / (sqrtf(BlockSum(ss)) + 1e-5f);
  }
  for (int64_t c = 8 * threadIdx.x; c < count; c += 8 * blockDim.x) {
    const int n = Count8(c, count);
    float v[8];
    Load8(row + c, n, v);
    for (int i = 0; i < 8; ++i) v[i] = DeviceSilu(v[i]) * inv;
    Store8(row + c, n, v);
  }
}

template <class T>
void LaunchRmsNorm(cudaStream_t s, T* x, int64_t ldx, const float* add, int64_t ldadd, int64_t rows,
                   int64_t cols, const float* w, T* y, int64_t ldy, __nv_bfloat16* y16) {
  auto* const kernel = RmsNormKernel<T>;
  kernel<<<static_cast<unsigned>(rows), RowThreads(cols), 0, s>>>(x, ldx, add, ldadd, cols, w, y,
                                                                  ldy, y16);
}

template <class TY, class TZ>
void LaunchGatedRmsNorm(cudaStream_t s, TY* y, int64_t ldy, const TZ* z, int64_t ldz, int64_t rows,
                        int64_t cols, const float* w, const GatedNormOutput& o) {
  auto* const kernel = GatedRmsNormKernel<TY, TZ>;
  kernel<<<static_cast<unsigned>(rows), RowThreads(cols), 0, s>>>(y, ldy, z, ldz, cols, w, o);
}

template <class TY>
void LaunchGatedRmsNorm(cudaStream_t s, TY* y, int64_t ldy, ConstValues z, int64_t ldz,
                        int64_t rows, int64_t cols, const float* w, const GatedNormOutput& o) {
  if (z.is_bf16()) {
    LaunchGatedRmsNorm(s, y, ldy, z.bf16, ldz, rows, cols, w, o);
  } else {
    LaunchGatedRmsNorm(s, y, ldy, z.f32, ldz, rows, cols, w, o);
  }
}

template <class T>
void LaunchSiluL2Norm(cudaStream_t s, T* x, int64_t ldx, int64_t rows, int64_t cols, int64_t groups,
                      int64_t group) {
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(groups + 1));
  auto* const kernel = SiluL2NormKernel<T>;
  kernel<<<grid, RowThreads(std::max(group, cols - groups * group)), 0, s>>>(x, ldx, cols, groups,
                                                                             group);
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

absl::Status RmsNormRows(cudaStream_t s, ConstValues x, int64_t ldx, int64_t rows, int64_t cols,
                         const float* w, Values y, int64_t ldy, __nv_bfloat16* y16) {
  LACT_RETURN_IF_ERROR(SameElementType("RmsNormRows", {x, y}));
  if (y.is_bf16() && y16 != nullptr) {
    return absl::InvalidArgumentError("RmsNormRows: y16 is for float32 rows; bf16 y is rounded");
  }
  if (y.f32 == nullptr && y.bf16 == nullptr && y16 == nullptr) {
    return absl::InvalidArgumentError("RmsNormRows: give y, y16 or both");
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("RmsNormRows", rows);
  // x is only read without `add`.
  if (y.is_bf16()) {
    LaunchRmsNorm(s, const_cast<__nv_bfloat16*>(x.bf16), ldx, nullptr, 0, rows, cols, w, y.bf16,
                  ldy, nullptr);
  } else {
    LaunchRmsNorm(s, const_cast<float*>(x.f32), ldx, nullptr, 0, rows, cols, w, y.f32, ldy, y16);
  }
  const int64_t bytes = x.element_bytes();
  const int64_t y_bytes = y.f32 != nullptr || y.bf16 != nullptr ? y.element_bytes() : 0;
  NoteLaunch("RmsNormRows", bytes * rows * cols + 4 * cols,
             (y_bytes + (y16 != nullptr ? 2 : 0)) * rows * cols);
  return LaunchStatus("RmsNormRows");
}

absl::Status AddRmsNormRows(cudaStream_t s, float* x, int64_t ldx, const float* add, int64_t ldadd,
                            int64_t rows, int64_t cols, const float* w, float* y, int64_t ldy,
                            __nv_bfloat16* y16) {
  if (y == nullptr && y16 == nullptr) {
    return absl::InvalidArgumentError("AddRmsNormRows: give y, y16 or both");
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("AddRmsNormRows", rows);
  LaunchRmsNorm(s, x, ldx, add, ldadd, rows, cols, w, y, ldy, y16);
  NoteLaunch("AddRmsNormRows", 4 * (2 * rows * cols + cols),
             (4 + (y != nullptr ? 4 : 0) + (y16 != nullptr ? 2 : 0)) * rows * cols);
  return LaunchStatus("AddRmsNormRows");
}

absl::Status GatedRmsNormRows(cudaStream_t s, Values y, int64_t ldy, ConstValues z, int64_t ldz,
                              int64_t rows, int64_t cols, const float* w, GatedNormOutput out) {
  if (out.held != nullptr && out.out == nullptr) {
    return absl::InvalidArgumentError("GatedRmsNormRows: held rows need an out to sum into");
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("GatedRmsNormRows", rows);
  if (y.is_bf16()) {
    LaunchGatedRmsNorm(s, y.bf16, ldy, z, ldz, rows, cols, w, out);
  } else {
    LaunchGatedRmsNorm(s, y.f32, ldy, z, ldz, rows, cols, w, out);
  }
  const int64_t held = out.held != nullptr ? 2 : 0;
  NoteLaunch("GatedRmsNormRows",
             (y.element_bytes() + z.element_bytes() + held) * rows * cols + 4 * cols,
             (out.out != nullptr ? 2 : y.element_bytes()) * rows * cols);
  return LaunchStatus("GatedRmsNormRows");
}

absl::Status SiluL2NormGroups(cudaStream_t s, Values x, int64_t ldx, int64_t rows, int64_t cols,
                              int64_t groups, int64_t group) {
  if (groups < 0 || group < 1 || groups * group > cols || groups >= 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("SiluL2NormGroups: need 0 <= groups < 65535, group >= 1 and groups * group ",
                     "<= cols; got ", groups, " groups of ", group, " in ", cols, " columns"));
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("SiluL2NormGroups", rows);
  if (x.is_bf16()) {
    LaunchSiluL2Norm(s, x.bf16, ldx, rows, cols, groups, group);
  } else {
    LaunchSiluL2Norm(s, x.f32, ldx, rows, cols, groups, group);
  }
  NoteLaunch("SiluL2NormGroups", x.element_bytes() * rows * cols, x.element_bytes() * rows * cols);
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
