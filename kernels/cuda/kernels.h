// The CUDA backend's kernels other than GEMM (which is cuBLAS, device.h).
// Every function launches on `stream` and returns the launch status; shapes
// follow the CPU kernels of kernels/cpu (row-major, explicit row strides).
// Pointers are device pointers.
#ifndef LACT_KERNELS_CUDA_KERNELS_H_
#define LACT_KERNELS_CUDA_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/values.h"

namespace lact::cuda {

// Arrays typed Values or ConstValues (values.h) are float32 or bf16: a
// tile's intermediates, bf16 in bf16 precision. The kernels compute in
// float32 whichever they read and write; where a function takes several,
// they must share their element type (INVALID_ARGUMENT otherwise).

// y[r] = x[r] / sqrt(mean(x[r]^2) + 1e-5) * w (y may alias x), and, when
// y16 is not null (float32 rows only), y16[r] = bf16(y[r]) (row stride ldy
// too): the rounding a bf16 GEMM reading y needs, made in the same pass.
// y may be empty where y16 is given (only the rounding wanted).
absl::Status RmsNormRows(cudaStream_t s, ConstValues x, int64_t ldx, int64_t rows, int64_t cols,
                         const float* w, Values y, int64_t ldy, __nv_bfloat16* y16 = nullptr);
// The residual add fused into the next norm: x[r] += add[r], then
// RmsNormRows of the new x (y must not alias x or add; y may be null where
// y16 is given).
absl::Status AddRmsNormRows(cudaStream_t s, float* x, int64_t ldx, const float* add, int64_t ldadd,
                            int64_t rows, int64_t cols, const float* w, float* y, int64_t ldy,
                            __nv_bfloat16* y16 = nullptr);
// Where GatedRmsNormRows writes bf16 rows instead of in place: `out` (row
// stride ldo), and, when `held` is given too (row stride ldheld), the sum
// out[r] = bf16(bf16(normed[r]) + held[r]): the two BiMamba directions'
// rows, added for the one out_proj of their sum. out may alias y or held
// where their row strides are equal.
struct GatedNormOutput {
  __nv_bfloat16* out = nullptr;
  int64_t ldo = 0;
  const __nv_bfloat16* held = nullptr;
  int64_t ldheld = 0;
};
// y[r] = rmsnorm(y[r] * silu(z[r]), w), in place; or, when out.out is
// given, into it alone, y left as it was. y and z may differ in element
// type.
absl::Status GatedRmsNormRows(cudaStream_t s, Values y, int64_t ldy, ConstValues z, int64_t ldz,
                              int64_t rows, int64_t cols, const float* w, GatedNormOutput out = {});
// In place on `rows` rows of `cols` values: every value v <- silu(v), then
// each of the first `groups` groups of `group` values of a row divided by
// (its L2 norm + 1e-5) (kernels/cpu's SiluRows then L2NormGroups, in one
// pass). INVALID_ARGUMENT unless 0 <= groups < 65535, group >= 1 and
// groups * group <= cols.
absl::Status SiluL2NormGroups(cudaStream_t s, Values x, int64_t ldx, int64_t rows, int64_t cols,
                              int64_t groups, int64_t group);
// a[i] = silu(a[i]) * b[i] for i < n (contiguous).
absl::Status SiluMul(cudaStream_t s, Values a, ConstValues b, int64_t n);
// out[t, j] = softplus(in[t, j] + bias[j] + shift), in and out [rows, cols]
// with strides (out float32).
absl::Status SoftplusBias(cudaStream_t s, ConstValues in, int64_t ldi, int64_t rows, int64_t cols,
                          const float* bias, float shift, float* out, int64_t ldo);

// Causal depthwise conv + silu with W-1 history rows (kernels/cpu/conv.h);
// `history` [W-1, C] is advanced in place (`scratch` holds (W-1)*C floats).
// ldu and ldo may be negative (rows walked from the last, as SsdScan's).
// u and out may differ in element type (bf16 out for SsdScanBf16).
absl::Status ConvSilu(cudaStream_t s, ConstValues u, int64_t ldu, int64_t tokens, int64_t channels,
                      int width, const float* weight, const float* bias, float* history,
                      float* scratch, Values out, int64_t ldo);

// The selective scan of docs/model.md, BiMamba as its per-token recurrence, one
// thread per (head, channel); state [H, P, N] in and out.
absl::Status ScanRecurrence(cudaStream_t s, int64_t tokens, int heads, int head_dim, int d_state,
                            const float* x, int64_t ldx, const float* b, int64_t ldb,
                            const float* c, int64_t ldc, const float* dt, int64_t lddt,
                            const float* a_log, const float* d_skip, float* y, int64_t ldy,
                            float* state);

// LaCT gradient factors in place for `heads` heads (kernels/cpu/lact_layer.cc):
// g <- lr0 * dG, u <- lr1 * Hd, dh <- lr2 * dU, where g, u, dh are
// [heads, tokens, hidden] and head h's three rates are columns 3h..3h+2 of
// lr (float32, row stride ldlr).
absl::Status LactGradFactors(cudaStream_t s, Values g, Values u, Values dh, int64_t heads,
                             int64_t tokens, int64_t hidden, const float* lr, int64_t ldlr);
// w += dw, then each row rescaled to the norm of the same row of w_init;
// and w16 = bf16(w) when w16 is not null ([rows, cols] like w).
absl::Status WeightNormUpdate(cudaStream_t s, float* w, const float* dw, const float* w_init,
                              int64_t rows, int64_t cols, __nv_bfloat16* w16 = nullptr);

// Each of `batch` contiguous [rows, cols] matrices divided by (its Frobenius
// norm + 1e-7).
absl::Status NormalizeMatrices(cudaStream_t s, float* x, int64_t batch, int64_t size);
// out[i] = bf16(in[i]) for i < n, round to nearest even.
absl::Status RoundToBf16(cudaStream_t s, const float* in, int64_t n, __nv_bfloat16* out);
// out[i] = alpha * a[i] + beta * b[i] for i < n (contiguous; out may alias a or b).
absl::Status Axpby(cudaStream_t s, float alpha, const float* a, float beta, const float* b,
                   float* out, int64_t n);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_KERNELS_H_
