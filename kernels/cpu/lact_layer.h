// LaCT large-chunk test-time training with SwiGLU fast weights (docs/model.md
// section 6), split into the steps that distribution needs:
//   1. projections of a tile of tokens (k, v, lr for the update; q to apply),
//   2. partial sums of dw0, dw1, dw2 over any subset of a chunk's tokens
//      (sums over a partition of the chunk add up to the whole-chunk sums:
//      this is what workers all-reduce),
//   3. the update from the summed gradients (Muon, w += dw, weight norm),
//   4. applying the fast weights, o = f_w(q).
// Fast weights of all heads are stored contiguously as in the state:
// w0, w2 [H_t, d_h, dh], w1 [H_t, dh, d_h]; gradients have the same layout.
#ifndef LACT_KERNELS_CPU_LACT_LAYER_H_
#define LACT_KERNELS_CPU_LACT_LAYER_H_

#include <cstdint>
#include <vector>

#include "common/model.h"
#include "kernels/cpu/blas.h"

namespace lact::cpu {

struct FastWeightsRef {
  const float* w0;
  const float* w1;
  const float* w2;
};

struct FastGradsRef {
  float* dw0;
  float* dw1;
  float* dw2;
};

struct LactWorkspace {
  std::vector<float> g, u, dh;
  // The bf16 matmul's operands, made as bf16 once per head: k (q), v, the
  // gradient factors (the hidden rows), and fast weights without a copy.
  std::vector<uint16_t> k16, v16, g16, u16, dh16, w16;
};

// kv[T, 2D] = (silu(h @ qkv[k|v]^T)), k l2-normalised per head;
// lr[T, 3 H_t] = softplus(h @ lr_w^T + lr_b + inv_softplus(base_lr)).
// With Operands::kBf16 (h and the weights rounded already) the
// projections are bf16 GEMMs (Gemm in blas.h); so is every GEMM below.
void LactKeyValueLr(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t tokens,
                    float* kv, float* lr, Operands operands = Operands::kFp32);

// q[T, D] = l2norm(silu(h @ qkv[q]^T)) per head.
void LactQuery(const ModelConfig& c, const LayerWeights& w, const float* h, int64_t tokens,
               float* q, Operands operands = Operands::kFp32);

// Both with h made as bf16 by the caller ([T, D] dense), for the bf16 mode
// on the bf16 matmul (Linear's bf16 overload in blas.h).
void LactKeyValueLr(const ModelConfig& c, const LayerWeights& w, const uint16_t* h, int64_t tokens,
                    float* kv, float* lr, Operands operands);
void LactQuery(const ModelConfig& c, const LayerWeights& w, const uint16_t* h, int64_t tokens,
               float* q, Operands operands);

// grads += the chunk-gradient sums over these tokens (kv, lr as produced above).
// With Operands::kBf16 the hidden-side factors of the gradient GEMMs are
// rounded to bf16 here; kv and `fast` must come rounded already (or made
// ready by RoundForBf16Gemm). On the bf16 matmul (Bf16MatmulOn()) each
// head's k and v are packed to bf16 once for its five products, the
// factors are made as bf16, and the fast weights are read from the
// operands' copies where they hold them.
void AccumulateFastWeightGrads(const ModelConfig& c, const float* kv, const float* lr,
                               int64_t tokens, FastWeightsRef fast, FastGradsRef grads,
                               LactWorkspace* ws, Operands operands = Operands::kFp32);

// w += (muon_steps or normalize_update ? NS(dw) : dw), NS in bf16 with
// ns_bf16 (newton_schulz.h), then each row rescaled to its initial norm.
// Consumes `grads` (Muon rewrites them).
void UpdateFastWeights(const ModelConfig& c, FastGradsRef grads, FastWeightsRef initial, float* w0,
                       float* w1, float* w2);

// o[T, D] = f_w(q) per head (before o_norm), q[T, D] as produced by LactQuery.
// With Operands::kBf16, silu(g) * u is rounded to bf16 here; q and `fast`
// must come rounded already (or made ready by RoundForBf16Gemm). On the
// bf16 matmul, each head's q is packed once and silu(g) * u made as bf16,
// as above.
void ApplyFastWeights(const ModelConfig& c, const float* q, int64_t tokens, FastWeightsRef fast,
                      float* o, LactWorkspace* ws, Operands operands = Operands::kFp32);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_LACT_LAYER_H_
