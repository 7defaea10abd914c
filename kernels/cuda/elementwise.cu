// Elementwise passes: silu-gating, adds, softplus with bias, the LaCT
// gradient factors and the bf16 rounding.
#include "common/status_macros.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/traffic.h"
#include "kernels/cuda/vector_access.h"

namespace lact::cuda {
namespace {

// Eight elements a thread (vector_access.h).
template <class T>
__global__ void SiluMulKernel(T* a, const T* b, int64_t n) {
  const int64_t i = 8 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (i >= n) return;
  const int count = Count8(i, n);
  float av[8], bv[8];
  Load8(a + i, count, av);
  Load8(b + i, count, bv);
  for (int k = 0; k < 8; ++k) av[k] = DeviceSilu(av[k]) * bv[k];
  Store8(a + i, count, av);
}

template <class T>
__global__ void SoftplusBiasKernel(const T* in, int64_t ldi, int64_t cols, const float* bias,
                                   float shift, float* out, int64_t ldo) {
  const int64_t row = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = Load(in[row * ldi + c]) + bias[c] + shift;
    out[row * ldo + c] = v > 20.0f ? v : log1pf(expf(v));
  }
}

// One block per row (head, token) of the [heads, tokens, hidden] factors,
// eight columns a thread.
template <class T>
__global__ void GradFactorsKernel(T* g, T* u, T* dh, int64_t tokens, int64_t hidden,
                                  const float* lr, int64_t ldlr) {
  const int64_t row = blockIdx.x, head = row / tokens, t = row - head * tokens;
  const float* rates = lr + t * ldlr + 3 * head;
  const float r0 = rates[0], r1 = rates[1], r2 = rates[2];
  for (int64_t c = 8 * threadIdx.x; c < hidden; c += 8 * blockDim.x) {
    const int n = Count8(c, hidden);
    const int64_t i = row * hidden + c;
    float gv[8], uv[8], dhv[8];
    Load8(g + i, n, gv);
    Load8(u + i, n, uv);
    Load8(dh + i, n, dhv);
    for (int k = 0; k < 8; ++k) {
      const float x = gv[k], sg = DeviceSigmoid(x), silu = x * sg;
      gv[k] = r0 * dhv[k] * uv[k] * sg * (1.0f + x * (1.0f - sg));
      const float hd = r1 * silu * uv[k];
      dhv[k] = r2 * dhv[k] * silu;
      uv[k] = hd;
    }
    Store8(g + i, n, gv);
    Store8(u + i, n, uv);
    Store8(dh + i, n, dhv);
  }
}

template <class T>
void LaunchSiluMul(cudaStream_t s, T* a, const T* b, int64_t n) {
  auto* const kernel = SiluMulKernel<T>;
  kernel<<<Blocks((n + 7) / 8), kThreads, 0, s>>>(a, b, n);
}

template <class T>
void LaunchSoftplusBias(cudaStream_t s, const T* in, int64_t ldi, int64_t rows, int64_t cols,
                        const float* bias, float shift, float* out, int64_t ldo) {
  auto* const kernel = SoftplusBiasKernel<T>;
  kernel<<<static_cast<unsigned>(rows), 32, 0, s>>>(in, ldi, cols, bias, shift, out, ldo);
}

template <class T>
void LaunchGradFactors(cudaStream_t s, T* g, T* u, T* dh, int64_t rows, int64_t tokens,
                       int64_t hidden, const float* lr, int64_t ldlr) {
  auto* const kernel = GradFactorsKernel<T>;
  kernel<<<static_cast<unsigned>(rows), RowThreads(hidden), 0, s>>>(g, u, dh, tokens, hidden, lr,
                                                                    ldlr);
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

absl::Status SiluMul(cudaStream_t s, Values a, ConstValues b, int64_t n) {
  LACT_RETURN_IF_ERROR(SameElementType("SiluMul", {a, b}));
  if (n == 0) return absl::OkStatus();
  if (a.is_bf16()) {
    LaunchSiluMul(s, a.bf16, b.bf16, n);
  } else {
    LaunchSiluMul(s, a.f32, b.f32, n);
  }
  NoteLaunch("SiluMul", 2 * a.element_bytes() * n, a.element_bytes() * n);
  return LaunchStatus("SiluMul");
}

absl::Status SoftplusBias(cudaStream_t s, ConstValues in, int64_t ldi, int64_t rows, int64_t cols,
                          const float* bias, float shift, float* out, int64_t ldo) {
  if (rows * cols == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("SoftplusBias", rows);
  if (in.is_bf16()) {
    LaunchSoftplusBias(s, in.bf16, ldi, rows, cols, bias, shift, out, ldo);
  } else {
    LaunchSoftplusBias(s, in.f32, ldi, rows, cols, bias, shift, out, ldo);
  }
  NoteLaunch("SoftplusBias", in.element_bytes() * rows * cols + 4 * cols, 4 * rows * cols);
  return LaunchStatus("SoftplusBias");
}

absl::Status LactGradFactors(cudaStream_t s, Values g, Values u, Values dh, int64_t heads,
                             int64_t tokens, int64_t hidden, const float* lr, int64_t ldlr) {
  LACT_RETURN_IF_ERROR(SameElementType("LactGradFactors", {g, u, dh}));
  const int64_t rows = heads * tokens, n = rows * hidden;
  if (n == 0) return absl::OkStatus();
  if (rows > kMaxRowBlocks) return TooManyRows("LactGradFactors", rows);
  if (g.is_bf16()) {
    LaunchGradFactors(s, g.bf16, u.bf16, dh.bf16, rows, tokens, hidden, lr, ldlr);
  } else {
    LaunchGradFactors(s, g.f32, u.f32, dh.f32, rows, tokens, hidden, lr, ldlr);
  }
  NoteLaunch("LactGradFactors", 3 * g.element_bytes() * n + 12 * rows, 3 * g.element_bytes() * n);
  return LaunchStatus("LactGradFactors");
}

}  // namespace lact::cuda
