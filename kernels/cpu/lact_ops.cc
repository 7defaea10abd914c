#include "kernels/cpu/lact_ops.h"

#include <cmath>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"

namespace lact::cpu {

void LactKeyValueLr(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t T,
                    float* kv, float* lr, Operands operands) {
  const int64_t D = c.d_model, ht = c.ttt_heads();
  Linear(h, D, T, D, w.qkv + D * D, 2 * D, kv, 2 * D, 0.0f, operands);
  SiluRows(kv, 2 * D, T, 2 * D);
  L2NormGroups(kv, 2 * D, T, ht, c.ttt.head_dim);
  Linear(h, D, T, D, w.lr_w, 3 * ht, lr, 3 * ht, 0.0f, operands);
  const float shift = static_cast<float>(InvSoftplus(c.ttt.base_lr));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < 3 * ht; ++j)
      lr[t * 3 * ht + j] = Softplus(lr[t * 3 * ht + j] + w.lr_b[j] + shift);
}

void LactQuery(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t T, float* q,
               Operands operands) {
  const int64_t D = c.d_model;
  Linear(h, D, T, D, w.qkv, D, q, D, 0.0f, operands);
  SiluRows(q, D, T, D);
  L2NormGroups(q, D, T, c.ttt_heads(), c.ttt.head_dim);
}

void AccumulateFastWeightGrads(const ModelConfig& c, const float* kv, const float* lr, int64_t T,
                               FastWeightsRef fast, FastGradsRef grads, LactWorkspace* ws,
                               Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden();
  const int64_t mat = dh * dhh;
  ws->g.resize(T * dhh);
  ws->u.resize(T * dhh);
  ws->dh.resize(T * dhh);
  float *g = ws->g.data(), *u = ws->u.data(), *dH = ws->dh.data();
  for (int64_t head = 0; head < ht; ++head) {
    const float* k = kv + head * dh;
    const float* v = kv + D + head * dh;
    const float* w0 = fast.w0 + head * mat;
    const float* w1 = fast.w1 + head * mat;
    const float* w2 = fast.w2 + head * mat;
    Gemm(operands, false, true, T, dhh, dh, 1.0f, k, 2 * D, w0, dh, 0.0f, g, dhh);     // G = K w0^T
    Gemm(operands, false, true, T, dhh, dh, 1.0f, k, 2 * D, w2, dh, 0.0f, u, dhh);     // U = K w2^T
    Gemm(operands, false, false, T, dhh, dh, 1.0f, v, 2 * D, w1, dhh, 0.0f, dH, dhh);  // dH = V w1
    // In place: g <- LR0 * dG, u <- LR1 * Hd, dH <- LR2 * dU (the token's
    // learning rates folded into the left factor of each outer product).
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float* lrt = lr + t * 3 * ht + 3 * head;
      const float lr0 = lrt[0], lr1 = lrt[1], lr2 = lrt[2];
      float *gt = g + t * dhh, *ut = u + t * dhh, *dht = dH + t * dhh;
#pragma omp simd
      for (int64_t i = 0; i < dhh; ++i) {
        const float gv = gt[i], uv = ut[i], dhv = dht[i];
        const float sg = Sigmoid(gv), silu = gv * sg;
        gt[i] = lr0 * dhv * uv * sg * (1.0f + gv * (1.0f - sg));
        ut[i] = lr1 * silu * uv;
        dht[i] = lr2 * dhv * silu;
      }
    }
    if (operands == Operands::kBf16) {
      RoundForBf16Gemm(g, dhh, T, dhh);
      RoundForBf16Gemm(u, dhh, T, dhh);
      RoundForBf16Gemm(dH, dhh, T, dhh);
    }
    Gemm(operands, true, false, dh, dhh, T, 1.0f, v, 2 * D, u, dhh, 1.0f, grads.dw1 + head * mat,
         dhh);  // V^T (LR1 Hd)
    Gemm(operands, true, false, dhh, dh, T, 1.0f, g, dhh, k, 2 * D, 1.0f, grads.dw0 + head * mat,
         dh);  // (LR0 dG)^T K
    Gemm(operands, true, false, dhh, dh, T, 1.0f, dH, dhh, k, 2 * D, 1.0f, grads.dw2 + head * mat,
         dh);  // (LR2 dU)^T K
  }
}

namespace {

void UpdateOne(float* w, float* dw, const float* w_init, int64_t rows, int64_t cols,
               int muon_steps) {
  if (muon_steps > 0) NewtonSchulz(dw, rows, cols, muon_steps);
  for (int64_t r = 0; r < rows; ++r) {
    float* wr = w + r * cols;
    const float* ir = w_init + r * cols;
    double n = 0, n0 = 0;
    for (int64_t i = 0; i < cols; ++i) {
      wr[i] += dw[r * cols + i];
      n += static_cast<double>(wr[i]) * wr[i];
      n0 += static_cast<double>(ir[i]) * ir[i];
    }
    const float scale = static_cast<float>(std::sqrt(n0) / (std::sqrt(n) + 1e-5));
    for (int64_t i = 0; i < cols; ++i) wr[i] *= scale;
  }
}

}  // namespace

void UpdateFastWeights(const ModelConfig& c, FastGradsRef grads, FastWeightsRef initial, float* w0,
                       float* w1, float* w2) {
  const int64_t dh = c.ttt.head_dim, dhh = c.fast_hidden(), mat = dh * dhh;
  const int steps = c.ttt.muon_steps;
  for (int64_t head = 0; head < c.ttt_heads(); ++head) {
    const int64_t o = head * mat;
    UpdateOne(w0 + o, grads.dw0 + o, initial.w0 + o, dhh, dh, steps);
    UpdateOne(w1 + o, grads.dw1 + o, initial.w1 + o, dh, dhh, steps);
    UpdateOne(w2 + o, grads.dw2 + o, initial.w2 + o, dhh, dh, steps);
  }
}

void ApplyFastWeights(const ModelConfig& c, const float* q, int64_t T, FastWeightsRef fast,
                      float* o, LactWorkspace* ws, Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, dh = c.ttt.head_dim, dhh = c.fast_hidden(), mat = dh * dhh;
  ws->g.resize(T * dhh);
  ws->u.resize(T * dhh);
  float *g = ws->g.data(), *u = ws->u.data();
  for (int64_t head = 0; head < c.ttt_heads(); ++head) {
    const float* qh = q + head * dh;
    Gemm(operands, false, true, T, dhh, dh, 1.0f, qh, D, fast.w0 + head * mat, dh, 0.0f, g, dhh);
    Gemm(operands, false, true, T, dhh, dh, 1.0f, qh, D, fast.w2 + head * mat, dh, 0.0f, u, dhh);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * dhh; ++i) g[i] = Silu(g[i]) * u[i];
    if (operands == Operands::kBf16) RoundForBf16Gemm(g, dhh, T, dhh);
    Gemm(operands, false, true, T, dh, dhh, 1.0f, g, dhh, fast.w1 + head * mat, dhh, 0.0f,
         o + head * dh, D);
  }
}

void NewtonSchulz(float* g, int64_t rows, int64_t cols, int steps) {
  double norm = 0;
  for (int64_t i = 0; i < rows * cols; ++i) norm += static_cast<double>(g[i]) * g[i];
  const float inv = static_cast<float>(1.0 / (std::sqrt(norm) + 1e-7));
  const bool transposed = rows > cols;
  const int64_t r = transposed ? cols : rows, k = transposed ? rows : cols;
  std::vector<float> x(r * k), a(r * r), b(r * r), next(r * k);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      (transposed ? x[j * k + i] : x[i * k + j]) = g[i * cols + j] * inv;
  for (int s = 0; s < steps; ++s) {
    Gemm(false, true, r, r, k, 1.0f, x.data(), k, x.data(), k, 0.0f, a.data(), r);      // A = X X^T
    Gemm(false, false, r, r, r, 2.0315f, a.data(), r, a.data(), r, 0.0f, b.data(), r);  // B = c A A
    for (int64_t i = 0; i < r * r; ++i) b[i] += -4.7750f * a[i];                        //   + b A
    next = x;
    Gemm(false, false, r, k, r, 1.0f, b.data(), r, x.data(), k, 3.4445f, next.data(),
         k);  // aX + B X
    x.swap(next);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) g[i * cols + j] = transposed ? x[j * k + i] : x[i * k + j];
}

}  // namespace lact::cpu
