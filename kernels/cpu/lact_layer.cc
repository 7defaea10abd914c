#include "kernels/cpu/lact_layer.h"

#include <cmath>

#include "common/half.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/newton_schulz.h"
#include "kernels/cpu/simd.h"

namespace lact::cpu {

namespace {

// y[T, out] = h @ w^T for h as float32 rows or as bf16 ones (blas.h).
void Project(const float* h, int64_t T, int64_t D, const float* w, int64_t out, float* y,
             Operands operands) {
  Linear(h, D, T, D, w, out, y, out, 0.0f, operands);
}
void Project(const uint16_t* h, int64_t T, int64_t D, const float* w, int64_t out, float* y,
             Operands operands) {
  Linear(h, T, D, w, out, y, out, 0.0f, operands);
}

template <typename H>
void KeyValueLr(const ModelConfig& c, const LayerWeights& w, const H* h, int64_t T, float* kv,
                float* lr, Operands operands) {
  const int64_t D = c.d_model, ht = c.ttt_heads();
  Project(h, T, D, w.qkv + D * D, 2 * D, kv, operands);
  SiluRows(kv, 2 * D, T, 2 * D);
  L2NormGroups(kv, 2 * D, T, ht, c.ttt.head_dim);
  Project(h, T, D, w.lr_w, 3 * ht, lr, operands);
  const float shift = static_cast<float>(InvSoftplus(c.ttt.base_lr));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < 3 * ht; ++j)
      lr[t * 3 * ht + j] = Softplus(lr[t * 3 * ht + j] + w.lr_b[j] + shift);
}

template <typename H>
void Query(const ModelConfig& c, const LayerWeights& w, const H* h, int64_t T, float* q,
           Operands operands) {
  const int64_t D = c.d_model;
  Project(h, T, D, w.qkv, D, q, operands);
  SiluRows(q, D, T, D);
  L2NormGroups(q, D, T, c.ttt_heads(), c.ttt.head_dim);
}

}  // namespace

void LactKeyValueLr(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t T,
                    float* kv, float* lr, Operands operands) {
  KeyValueLr(c, w, h, T, kv, lr, operands);
}

void LactKeyValueLr(const ModelConfig& c, const LayerWeights& w, const uint16_t* h, int64_t T,
                    float* kv, float* lr, Operands operands) {
  KeyValueLr(c, w, h, T, kv, lr, operands);
}

void LactQuery(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t T, float* q,
               Operands operands) {
  Query(c, w, h, T, q, operands);
}

void LactQuery(const ModelConfig& c, const LayerWeights& w, const uint16_t* h, int64_t T, float* q,
               Operands operands) {
  Query(c, w, h, T, q, operands);
}

namespace {

// The chunk gradient's factors for one head, from G = K w0^T, U = K w2^T
// and dH = V w1 ([T, dhh] each): LR0 dG, LR1 Hd and LR2 dU (the token's
// learning rates folded into the left factor of each outer product),
// written as float32 (in place allowed) or as bf16.
template <typename Out>
void GradFactors(const float* lr, int64_t lr_ld, int64_t T, int64_t dhh, const float* g,
                 const float* u, const float* dH, Out* g_out, Out* u_out, Out* dh_out) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* lrt = lr + t * lr_ld;
    const float lr0 = lrt[0], lr1 = lrt[1], lr2 = lrt[2];
    const int64_t row = t * dhh;
    ForEachVector(dhh, [&](int64_t i, auto like) {
      const auto gv = LoadLike(like, g + row + i), uv = LoadLike(like, u + row + i),
                 dhv = LoadLike(like, dH + row + i);
      const auto sg = SigmoidOf(gv), silu = gv * sg;
      Put(lr0 * dhv * uv * sg * (1.0f + gv * (1.0f - sg)), g_out + row + i);
      Put(lr1 * silu * uv, u_out + row + i);
      Put(lr2 * dhv * silu, dh_out + row + i);
    });
  }
}

// rows x cols of x (row stride ld) as dense bf16, in `out`.
const uint16_t* Pack(const float* x, int64_t ld, int64_t rows, int64_t cols,
                     std::vector<uint16_t>* out) {
  if (static_cast<int64_t>(out->size()) < rows * cols) out->resize(rows * cols);
  PackRowsToBf16(x, ld, rows, cols, out->data());
  return out->data();
}

// The fast weights of one head ([3, mat] values at w0, w1, w2) as bf16:
// the operands' copies where they hold them, else packed into `scratch`.
struct HeadBits {
  const uint16_t *w0, *w1, *w2;
};
HeadBits FastBits(const Operands& operands, FastWeightsRef fast, int64_t offset, int64_t mat,
                  std::vector<uint16_t>* scratch) {
  const Bf16Copies* copies = operands.copies();
  const float* w[3] = {fast.w0 + offset, fast.w1 + offset, fast.w2 + offset};
  const uint16_t* bits[3];
  if (static_cast<int64_t>(scratch->size()) < 3 * mat) scratch->resize(3 * mat);
  for (int m = 0; m < 3; ++m) {
    bits[m] = copies != nullptr ? copies->Find(w[m], mat) : nullptr;
    if (bits[m] == nullptr) {
      PackRowsToBf16(w[m], mat, 1, mat, scratch->data() + m * mat);
      bits[m] = scratch->data() + m * mat;
    }
  }
  return {bits[0], bits[1], bits[2]};
}

// AccumulateFastWeightGrads on the bf16 matmul (lact_layer.h).
void AccumulateGradsBf16(const ModelConfig& c, const float* kv, const float* lr, int64_t T,
                         FastWeightsRef fast, FastGradsRef grads, LactWorkspace* ws,
                         const Operands& operands) {
  const int64_t D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden();
  const int64_t mat = dh * dhh;
  float *g = ws->g.data(), *u = ws->u.data(), *dH = ws->dh.data();
  for (auto* v : {&ws->g16, &ws->u16, &ws->dh16}) {
    if (static_cast<int64_t>(v->size()) < T * dhh) v->resize(T * dhh);
  }
  uint16_t *g16 = ws->g16.data(), *u16 = ws->u16.data(), *dh16 = ws->dh16.data();
  for (int64_t head = 0; head < ht; ++head) {
    const uint16_t* k = Pack(kv + head * dh, 2 * D, T, dh, &ws->k16);
    const uint16_t* v = Pack(kv + D + head * dh, 2 * D, T, dh, &ws->v16);
    const HeadBits w = FastBits(operands, fast, head * mat, mat, &ws->w16);
    GemmBf16(false, true, T, dhh, dh, k, w.w0, 0.0f, g, dhh);    // G = K w0^T
    GemmBf16(false, true, T, dhh, dh, k, w.w2, 0.0f, u, dhh);    // U = K w2^T
    GemmBf16(false, false, T, dhh, dh, v, w.w1, 0.0f, dH, dhh);  // dH = V w1
    GradFactors(lr + 3 * head, 3 * ht, T, dhh, g, u, dH, g16, u16, dh16);
    GemmBf16(true, false, dh, dhh, T, v, u16, 1.0f, grads.dw1 + head * mat, dhh);
    GemmBf16(true, false, dhh, dh, T, g16, k, 1.0f, grads.dw0 + head * mat, dh);
    GemmBf16(true, false, dhh, dh, T, dh16, k, 1.0f, grads.dw2 + head * mat, dh);
  }
}

}  // namespace

void AccumulateFastWeightGrads(const ModelConfig& c, const float* kv, const float* lr, int64_t T,
                               FastWeightsRef fast, FastGradsRef grads, LactWorkspace* ws,
                               Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden();
  const int64_t mat = dh * dhh;
  ws->g.resize(T * dhh);
  ws->u.resize(T * dhh);
  ws->dh.resize(T * dhh);
  if (operands.bf16() && Bf16MatmulOn()) {
    AccumulateGradsBf16(c, kv, lr, T, fast, grads, ws, operands);
    return;
  }
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
    GradFactors(lr + 3 * head, 3 * ht, T, dhh, g, u, dH, g, u, dH);                    // in place
    if (operands.bf16()) {
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
               const TttConfig& t) {
  if (t.muon_steps > 0 || t.normalize_update) NewtonSchulz(dw, rows, cols, t.muon_steps, t.ns_bf16);
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
  for (int64_t head = 0; head < c.ttt_heads(); ++head) {
    const int64_t o = head * mat;
    UpdateOne(w0 + o, grads.dw0 + o, initial.w0 + o, dhh, dh, c.ttt);
    UpdateOne(w1 + o, grads.dw1 + o, initial.w1 + o, dh, dhh, c.ttt);
    UpdateOne(w2 + o, grads.dw2 + o, initial.w2 + o, dhh, dh, c.ttt);
  }
}

void ApplyFastWeights(const ModelConfig& c, const float* q, int64_t T, FastWeightsRef fast,
                      float* o, LactWorkspace* ws, Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, dh = c.ttt.head_dim, dhh = c.fast_hidden(), mat = dh * dhh;
  ws->g.resize(T * dhh);
  ws->u.resize(T * dhh);
  float *g = ws->g.data(), *u = ws->u.data();
  if (operands.bf16() && Bf16MatmulOn()) {
    if (static_cast<int64_t>(ws->g16.size()) < T * dhh) ws->g16.resize(T * dhh);
    uint16_t* hidden = ws->g16.data();
    for (int64_t head = 0; head < c.ttt_heads(); ++head) {
      const uint16_t* qh = Pack(q + head * dh, D, T, dh, &ws->k16);
      const HeadBits w = FastBits(operands, fast, head * mat, mat, &ws->w16);
      GemmBf16(false, true, T, dhh, dh, qh, w.w0, 0.0f, g, dhh);
      GemmBf16(false, true, T, dhh, dh, qh, w.w2, 0.0f, u, dhh);
      ParallelForEachVector(T * dhh, [&](int64_t i, auto like) {
        Put(SiluOf(LoadLike(like, g + i)) * LoadLike(like, u + i), hidden + i);
      });
      GemmBf16(false, true, T, dh, dhh, hidden, w.w1, 0.0f, o + head * dh, D);
    }
    return;
  }
  for (int64_t head = 0; head < c.ttt_heads(); ++head) {
    const float* qh = q + head * dh;
    Gemm(operands, false, true, T, dhh, dh, 1.0f, qh, D, fast.w0 + head * mat, dh, 0.0f, g, dhh);
    Gemm(operands, false, true, T, dhh, dh, 1.0f, qh, D, fast.w2 + head * mat, dh, 0.0f, u, dhh);
    ParallelForEachVector(T * dhh, [&](int64_t i, auto like) {
      Put(SiluOf(LoadLike(like, g + i)) * LoadLike(like, u + i), g + i);
    });
    if (operands.bf16()) RoundForBf16Gemm(g, dhh, T, dhh);
    Gemm(operands, false, true, T, dh, dhh, 1.0f, g, dhh, fast.w1 + head * mat, dhh, 0.0f,
         o + head * dh, D);
  }
}

}  // namespace lact::cpu
