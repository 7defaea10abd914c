#include "kernels/cpu/ssd_scan.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"

namespace lact::cpu {
namespace {

// Tokens per SSD chunk: the intra-chunk part costs kChunk^2 per token, the
// state hand-off P*N per chunk. For preset:small 32 ran a 4,096-token scan
// 1.15x faster than 64 on one core and 1.06x on two, and 1.5x faster than
// 128: the intra-chunk product halves, and GEMMs with a 32-long sum still
// run near sgemm's small-matrix rate.
constexpr int64_t kChunk = 32;

// One chunk of `n` tokens at t0 for head h, given cb = C B^T of the chunk
// (row stride kChunk) and cs = this head's columns of C S^T with the state
// the chunk starts from (row stride ld): writes y, this head's columns of xw
// (the decay-weighted inputs for the state update, row stride ld), decays
// this head's state by the chunk's product and returns the chunk's log decay.
float ScanChunkHead(const ScanParams& p, int h, int64_t t0, int64_t n, const float* cb,
                    const float* cs, float* xw, int64_t ld, float* cum, float* m, float* state) {
  const int64_t P = p.head_dim, N = p.d_state;
  const float a = p.a[h];
  float run = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    run += p.dt[(t0 + i) * p.lddt + h] * a;
    cum[i] = run;
  }
  // M[i, j] = (C_i . B_j) exp(cum_i - cum_j) dt_j for j <= i.
  for (int64_t i = 0; i < n; ++i) {
    float* mi = m + i * n;
    for (int64_t j = 0; j <= i; ++j)
      mi[j] = cb[i * kChunk + j] * FastExp(cum[i] - cum[j]) * p.dt[(t0 + j) * p.lddt + h];
    std::fill(mi + i + 1, mi + n, 0.0f);
  }
  const float* xc = p.x + t0 * p.ldx + h * P;
  float* yc = p.y + t0 * p.ldy + h * P;
  // y = M @ X: a full GEMM over M's zeroed upper half does twice a
  // triangular multiply's arithmetic, but on oneDNN's kernels (blas.h)
  // it runs faster, and it needs no copy of X. (A non-finite x would now
  // reach the rows before it in its chunk, through 0 * inf; tokens are
  // checked finite where they enter, and the scan's own values stay so.)
  Gemm(false, false, n, P, n, 1.0f, m, n, xc, p.ldx, 0.0f, yc, p.ldy);
  const float d = p.d_skip != nullptr ? p.d_skip[h] : 0.0f;
  for (int64_t i = 0; i < n; ++i) {  // y += exp(cum_i) C_i S^T + D x
    const float e = std::exp(cum[i]);
    const float* csi = cs + i * ld;
    const float* xi = xc + i * p.ldx;
    float* yi = yc + i * p.ldy;
#pragma omp simd
    for (int64_t q = 0; q < P; ++q) yi[q] += e * csi[q] + d * xi[q];
  }
  // S = exp(cum_last) S + (X^T diag(w)) B with w_j = exp(cum_last - cum_j) dt_j;
  // here the decay and the weighted inputs, the product for all heads after.
  const float last = cum[n - 1];
  for (int64_t j = 0; j < n; ++j) {
    const float w = FastExp(last - cum[j]) * p.dt[(t0 + j) * p.lddt + h];
    const float* xj = xc + j * p.ldx;
    float* xwj = xw + j * ld;
#pragma omp simd
    for (int64_t q = 0; q < P; ++q) xwj[q] = w * xj[q];
  }
  const float decay = std::exp(last);
  float* sh = state + h * P * N;
  for (int64_t i = 0; i < P * N; ++i) sh[i] *= decay;
  return last;
}

}  // namespace

void SsdScan(const ScanParams& p, float* state, float* log_decay) {
  const int64_t T = p.tokens, N = p.d_state, P = p.head_dim;
  // Each thread takes a contiguous group of heads through all chunks. Per
  // chunk: C B^T (one B/C group for all heads), C S^T and the state update
  // as GEMMs over the thread's heads at once, the masked M @ X per head.
  // BLAS calls inside the parallel region run on the calling thread.
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), tid = omp_get_thread_num();
    const int h0 = p.heads * tid / threads, h1 = p.heads * (tid + 1) / threads;
    const int64_t gp = int64_t{h1 - h0} * P;
    float* group_state = state + int64_t{h0} * P * N;
    std::vector<float> cb(kChunk * kChunk), cs(kChunk * gp), xw(kChunk * gp), cum(kChunk),
        m(kChunk * kChunk);
    std::vector<float> total(h1 - h0, 0.0f);
    for (int64_t t0 = 0; t0 < T && gp > 0; t0 += kChunk) {
      const int64_t n = std::min(kChunk, T - t0);
      const float* cc = p.c + t0 * p.ldc;
      const float* bc = p.b + t0 * p.ldb;
      Gemm(false, true, n, n, N, 1.0f, cc, p.ldc, bc, p.ldb, 0.0f, cb.data(), kChunk);
      Gemm(false, true, n, gp, N, 1.0f, cc, p.ldc, group_state, N, 0.0f, cs.data(), gp);
      for (int h = h0; h < h1; ++h) {
        const int64_t col = int64_t{h - h0} * P;
        total[h - h0] += ScanChunkHead(p, h, t0, n, cb.data(), cs.data() + col, xw.data() + col, gp,
                                       cum.data(), m.data(), state);
      }
      Gemm(true, false, gp, N, n, 1.0f, xw.data(), gp, bc, p.ldb, 1.0f, group_state, N);
    }
    if (log_decay != nullptr) {
      for (int h = h0; h < h1; ++h) log_decay[h] += total[h - h0];
    }
  }
}

void SsdScanStateOnly(const ScanParams& p, float* state, float* log_decay) {
  const int64_t T = p.tokens, P = p.head_dim, N = p.d_state;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < p.heads; ++h) {
    std::vector<float> cum(kChunk), xw(kChunk * P);
    float* sh = state + static_cast<int64_t>(h) * P * N;
    float total = 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
      const int64_t n = std::min(kChunk, T - t0);
      float run = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        run += p.dt[(t0 + i) * p.lddt + h] * p.a[h];
        cum[i] = run;
      }
      const float* xc = p.x + t0 * p.ldx + h * P;
      for (int64_t j = 0; j < n; ++j) {
        const float w = FastExp(run - cum[j]) * p.dt[(t0 + j) * p.lddt + h];
        for (int64_t q = 0; q < P; ++q) xw[j * P + q] = w * xc[j * p.ldx + q];
      }
      Gemm(true, false, P, N, n, 1.0f, xw.data(), P, p.b + t0 * p.ldb, p.ldb, std::exp(run), sh, N);
      total += run;
    }
    log_decay[h] += total;
  }
}

void SsdAddCarry(const ScanParams& p, const float* carry) {
  const int64_t T = p.tokens, P = p.head_dim, N = p.d_state;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < p.heads; ++h) {
    std::vector<float> cs(kChunk * P);
    float cum = 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
      const int64_t n = std::min(kChunk, T - t0);
      Gemm(false, true, n, P, N, 1.0f, p.c + t0 * p.ldc, p.ldc, carry + h * P * N, N, 0.0f,
           cs.data(), P);
      for (int64_t i = 0; i < n; ++i) {
        cum += p.dt[(t0 + i) * p.lddt + h] * p.a[h];
        const float e = std::exp(cum);
        float* y = p.y + (t0 + i) * p.ldy + h * P;
        for (int64_t q = 0; q < P; ++q) y[q] += e * cs[i * P + q];
      }
    }
  }
}

void ComposeScanSummary(int heads, int64_t per_head, const float* first_state,
                        const float* first_log_decay, const float* second_state,
                        const float* second_log_decay, float* out_state, float* out_log_decay) {
  for (int h = 0; h < heads; ++h) {
    const float decay = std::exp(second_log_decay[h]);
    for (int64_t i = 0; i < per_head; ++i) {
      const int64_t k = h * per_head + i;
      out_state[k] = decay * first_state[k] + second_state[k];
    }
    if (out_log_decay != nullptr) out_log_decay[h] = first_log_decay[h] + second_log_decay[h];
  }
}

}  // namespace lact::cpu
