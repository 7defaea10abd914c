// The selective scan as its per-token recurrence: one thread per (head,
// channel) owns a row of the state and walks the tokens in order. Correct
// and simple; the chunked SSD kernel replaces it for speed.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

__global__ void ScanKernel(int64_t tokens, int heads, int head_dim, int d_state, const float* x,
                           int64_t ldx, const float* b, int64_t ldb, const float* c, int64_t ldc,
                           const float* dt, int64_t lddt, const float* a_log, const float* d_skip,
                           float* y, int64_t ldy, float* state) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<int64_t>(heads) * head_dim) return;
  const int h = static_cast<int>(i / head_dim);
  const float a = -expf(a_log[h]), skip = d_skip[h];
  float* s = state + i * d_state;
  for (int64_t t = 0; t < tokens; ++t) {
    const float d = dt[t * lddt + h], decay = expf(d * a), xv = x[t * ldx + i];
    const float* bt = b + t * ldb;
    const float* ct = c + t * ldc;
    float out = 0.0f;
    for (int n = 0; n < d_state; ++n) {
      const float v = decay * s[n] + d * xv * bt[n];
      s[n] = v;
      out += v * ct[n];
    }
    y[t * ldy + i] = out + skip * xv;
  }
}

}  // namespace

absl::Status ScanRecurrence(cudaStream_t s, int64_t tokens, int heads, int head_dim, int d_state,
                            const float* x, int64_t ldx, const float* b, int64_t ldb,
                            const float* c, int64_t ldc, const float* dt, int64_t lddt,
                            const float* a_log, const float* d_skip, float* y, int64_t ldy,
                            float* state) {
  const int64_t lanes = static_cast<int64_t>(heads) * head_dim;
  if (lanes == 0) return absl::OkStatus();
  ScanKernel<<<Blocks(lanes), kThreads, 0, s>>>(tokens, heads, head_dim, d_state, x, ldx, b, ldb, c,
                                                ldc, dt, lddt, a_log, d_skip, y, ldy, state);
  const int64_t per_state = lanes * d_state;
  NoteLaunch("ScanRecurrence", 4 * (tokens * (lanes + 2 * d_state + heads) + per_state),
             4 * (tokens * lanes + per_state));
  return LaunchStatus("ScanRecurrence");
}

}  // namespace lact::cuda
