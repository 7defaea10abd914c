// Elementwise passes: silu-gating, adds, softplus with bias, the LaCT
// gradient factors and the bf16 rounding.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

__global__ void SiluMulKernel(float* a, const float* b, int64_t n, __nv_bfloat16* a16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = DeviceSilu(a[i]) * b[i];
  if (a16 != nullptr) {
    a16[i] = __float2bfloat16_rn(v);
  } else {
    a[i] = v;
  }
}

__global__ void SoftplusBiasKernel(const float* in, int64_t ldi, int64_t rows, int64_t cols,
                                   const float* bias, float shift, float* out, int64_t ldo) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = in[r * ldi + c] + bias[c] + shift;
  out[r * ldo + c] = v > 20.0f ? v : log1pf(expf(v));
}

__global__ void GradFactorsKernel(float* g, float* u, float* dh, int64_t heads, int64_t tokens,
                                  int64_t hidden, const float* lr, int64_t ldlr,
                                  __nv_bfloat16* rounded) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= heads * tokens * hidden) return;
  const int64_t head = i / (tokens * hidden), t = (i / hidden) % tokens;
  const float* rates = lr + t * ldlr + 3 * head;
  const float gv = g[i], uv = u[i], dhv = dh[i];
  const float sg = DeviceSigmoid(gv), silu = gv * sg;
  const float g_out = rates[0] * dhv * uv * sg * (1.0f + gv * (1.0f - sg));
  const float u_out = rates[1] * silu * uv, dh_out = rates[2] * dhv * silu;
  if (rounded != nullptr) {
    const int64_t n = heads * tokens * hidden;
    rounded[i] = __float2bfloat16_rn(g_out);
    rounded[n + i] = __float2bfloat16_rn(u_out);
    rounded[2 * n + i] = __float2bfloat16_rn(dh_out);
  } else {
    g[i] = g_out;
    u[i] = u_out;
    dh[i] = dh_out;
  }
}

__global__ void RoundToBf16Kernel(const float* in, int64_t n, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void AxpbyKernel(float alpha, const float* a, float beta, const float* b, float* out,
                            int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = alpha * a[i] + beta * b[i];
}

}  // namespace

absl::Status RoundToBf16(cudaStream_t s, const float* in, int64_t n, __nv_bfloat16* out) {
  if (n == 0) return absl::OkStatus();
  RoundToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(in, n, out);
  NoteLaunch("RoundToBf16", 4 * n, 2 * n);
  return LaunchStatus("RoundToBf16");
}

absl::Status Axpby(cudaStream_t s, float alpha, const float* a, float beta, const float* b,
                   float* out, int64_t n) {
  if (n == 0) return absl::OkStatus();
  AxpbyKernel<<<Blocks(n), kThreads, 0, s>>>(alpha, a, beta, b, out, n);
  NoteLaunch("Axpby", 8 * n, 4 * n);
  return LaunchStatus("Axpby");
}

absl::Status SiluMul(cudaStream_t s, float* a, const float* b, int64_t n, __nv_bfloat16* a16) {
  if (n == 0) return absl::OkStatus();
  SiluMulKernel<<<Blocks(n), kThreads, 0, s>>>(a, b, n, a16);
  NoteLaunch("SiluMul", 8 * n, (a16 != nullptr ? 2 : 4) * n);
  return LaunchStatus("SiluMul");
}

absl::Status SoftplusBias(cudaStream_t s, const float* in, int64_t ldi, int64_t rows, int64_t cols,
                          const float* bias, float shift, float* out, int64_t ldo) {
  if (rows * cols == 0) return absl::OkStatus();
  SoftplusBiasKernel<<<Blocks(rows * cols), kThreads, 0, s>>>(in, ldi, rows, cols, bias, shift, out,
                                                              ldo);
  NoteLaunch("SoftplusBias", 4 * (rows * cols + cols), 4 * rows * cols);
  return LaunchStatus("SoftplusBias");
}

absl::Status LactGradFactors(cudaStream_t s, float* g, float* u, float* dh, int64_t heads,
                             int64_t tokens, int64_t hidden, const float* lr, int64_t ldlr,
                             __nv_bfloat16* rounded) {
  const int64_t n = heads * tokens * hidden;
  if (n == 0) return absl::OkStatus();
  GradFactorsKernel<<<Blocks(n), kThreads, 0, s>>>(g, u, dh, heads, tokens, hidden, lr, ldlr,
                                                   rounded);
  NoteLaunch("LactGradFactors", 12 * n + 12 * heads * tokens, (rounded != nullptr ? 6 : 12) * n);
  return LaunchStatus("LactGradFactors");
}

}  // namespace lact::cuda
