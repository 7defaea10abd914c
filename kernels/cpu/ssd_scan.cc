#include "kernels/cpu/ssd_scan.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"

namespace lact::cpu {
namespace {

// Tokens per SSD chunk: the intra-chunk part costs kChunk^2 per token, the
// state hand-off P*N per chunk.
constexpr int64_t kChunk = 64;

// Per-thread scratch for one head's chunk loop.
struct ChunkScratch {
  std::vector<float> cum, m, xw, cs;
  ChunkScratch(int64_t P, int64_t N)
      : cum(kChunk), m(kChunk * kChunk), xw(kChunk * std::max(P, N)), cs(kChunk * P) {}
};

// One chunk of `n` tokens starting at token t0, for head h.
void ScanChunk(const ScanParams& p, int h, int64_t t0, int64_t n, const float* cb, float* state, ChunkScratch* s) {
  const int64_t P = p.head_dim, N = p.d_state;
  const float a = p.a[h];
  float run = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    run += p.dt[(t0 + i) * p.lddt + h] * a;
    s->cum[i] = run;
  }
  // M[i, j] = (C_i . B_j) exp(cum_i - cum_j) dt_j for j <= i.
  for (int64_t i = 0; i < n; ++i) {
    float* mi = s->m.data() + i * n;
    for (int64_t j = 0; j <= i; ++j) {
      mi[j] = cb[i * kChunk + j] * FastExp(s->cum[i] - s->cum[j]) * p.dt[(t0 + j) * p.lddt + h];
    }
    std::fill(mi + i + 1, mi + n, 0.0f);
  }
  const float* xc = p.x + t0 * p.ldx + h * P;
  float* yc = p.y + t0 * p.ldy + h * P;
  // Carried state: cs[i, :] = exp(cum_i) * (C_i @ S^T).
  Gemm(false, true, n, P, N, 1.0f, p.c + t0 * p.ldc, p.ldc, state, N, 0.0f, s->cs.data(), P);
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(s->cum[i]);
    float* row = s->cs.data() + i * P;
    for (int64_t q = 0; q < P; ++q) row[q] *= e;
  }
  // y = cs + M @ X (+ D x).
  for (int64_t i = 0; i < n; ++i) std::copy(s->cs.data() + i * P, s->cs.data() + (i + 1) * P, yc + i * p.ldy);
  Gemm(false, false, n, P, n, 1.0f, s->m.data(), n, xc, p.ldx, 1.0f, yc, p.ldy);
  if (p.d_skip != nullptr) {
    const float d = p.d_skip[h];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t q = 0; q < P; ++q) yc[i * p.ldy + q] += d * xc[i * p.ldx + q];
  }
  // S = exp(cum_last) S + (X^T diag(w)) B with w_j = exp(cum_last - cum_j) dt_j.
  const float last = s->cum[n - 1];
  for (int64_t j = 0; j < n; ++j) {
    const float w = FastExp(last - s->cum[j]) * p.dt[(t0 + j) * p.lddt + h];
    for (int64_t q = 0; q < P; ++q) s->xw[j * P + q] = w * xc[j * p.ldx + q];
  }
  Gemm(true, false, P, N, n, 1.0f, s->xw.data(), P, p.b + t0 * p.ldb, p.ldb, std::exp(last), state, N);
}

}  // namespace

void SsdScan(const ScanParams& p, float* state, float* log_decay) {
  const int64_t T = p.tokens, N = p.d_state;
  const int64_t chunks = (T + kChunk - 1) / kChunk;
  // C_i . B_j within each chunk, shared by all heads (one B/C group).
  std::vector<float> cb(static_cast<size_t>(chunks) * kChunk * kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t t0 = k * kChunk, n = std::min(kChunk, T - t0);
    Gemm(false, true, n, n, N, 1.0f, p.c + t0 * p.ldc, p.ldc, p.b + t0 * p.ldb, p.ldb, 0.0f,
         cb.data() + k * kChunk * kChunk, kChunk);
  }
#pragma omp parallel for schedule(static)
  for (int h = 0; h < p.heads; ++h) {
    ChunkScratch scratch(p.head_dim, N);
    float* sh = state + static_cast<int64_t>(h) * p.head_dim * N;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * kChunk;
      ScanChunk(p, h, t0, std::min(kChunk, T - t0), cb.data() + k * kChunk * kChunk, sh, &scratch);
    }
    if (log_decay != nullptr) {
      float total = 0.0f;
      for (int64_t t = 0; t < T; ++t) total += p.dt[t * p.lddt + h] * p.a[h];
      log_decay[h] += total;
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
      Gemm(false, true, n, P, N, 1.0f, p.c + t0 * p.ldc, p.ldc, carry + h * P * N, N, 0.0f, cs.data(), P);
      for (int64_t i = 0; i < n; ++i) {
        cum += p.dt[(t0 + i) * p.lddt + h] * p.a[h];
        const float e = std::exp(cum);
        float* y = p.y + (t0 + i) * p.ldy + h * P;
        for (int64_t q = 0; q < P; ++q) y[q] += e * cs[i * P + q];
      }
    }
  }
}

void ComposeScanSummary(int heads, int64_t per_head, const float* first_state, const float* first_log_decay,
                        const float* second_state, const float* second_log_decay, float* out_state,
                        float* out_log_decay) {
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
