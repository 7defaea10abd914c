#include "worker/cpu_block.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/lact_ops.h"
#include "kernels/cpu/mamba_mixer.h"

namespace lact {
namespace {

using cpu::FastGradsRef;
using cpu::FastWeightsRef;

// acc = BiMamba(h) @ out_proj^T, tile by tile: forward left to right, then
// backward right to left on reversed tiles.
void BiMamba(const ModelConfig& c, const LayerWeights& w, int64_t tile, const Tensor& h, Tensor* acc,
             MambaState (&mamba)[2]) {
  const int64_t L = h.dim(0), D = c.d_model, di = c.d_inner();
  cpu::MixerWorkspace ws;
  std::vector<float> y(tile * di), rev(tile * D), a(tile * D);
  for (int64_t t0 = 0; t0 < L; t0 += tile) {
    const int64_t n = std::min(tile, L - t0);
    cpu::MambaMixerSegment(c, w.mamba[kForward], h.ptr() + t0 * D, n,
                           {mamba[kForward].ssm.ptr(), mamba[kForward].conv.ptr()}, &ws, y.data());
    cpu::Linear(y.data(), di, n, di, w.out_proj, D, acc->ptr() + t0 * D, D);
  }
  for (int64_t end = L; end > 0; end -= tile) {
    const int64_t n = std::min(tile, end);
    for (int64_t i = 0; i < n; ++i) std::copy_n(h.ptr() + (end - 1 - i) * D, D, rev.data() + i * D);
    cpu::MambaMixerSegment(c, w.mamba[kBackward], rev.data(), n,
                           {mamba[kBackward].ssm.ptr(), mamba[kBackward].conv.ptr()}, &ws, y.data());
    cpu::Linear(y.data(), di, n, di, w.out_proj, D, a.data(), D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* dst = acc->ptr() + (end - 1 - i) * D;
      const float* src = a.data() + i * D;
      for (int64_t k = 0; k < D; ++k) dst[k] += src[k];
    }
  }
}

// acc += LaCT(h): per chunk, gradient sums over its tiles, the update, then
// the updated fast weights applied to the chunk's tokens. Query: apply only.
void Lact(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile, const Tensor& h, Tensor* acc,
          LayerState* state) {
  const int64_t L = h.dim(0), D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim;
  const int64_t chunk = is_context && c.ttt.chunk_tokens > 0 ? c.ttt.chunk_tokens : L;
  const FastWeightsRef fast{state->w0.ptr(), state->w1.ptr(), state->w2.ptr()};
  cpu::LactWorkspace ws;
  std::vector<float> kv(tile * 2 * D), lr(tile * 3 * ht), q(tile * D), o(tile * D);
  std::vector<float> dw0(state->w0.size()), dw1(state->w1.size()), dw2(state->w2.size());
  for (int64_t c0 = 0; c0 < L; c0 += chunk) {
    const int64_t c1 = std::min(L, c0 + chunk);
    if (is_context) {
      std::fill(dw0.begin(), dw0.end(), 0.0f);
      std::fill(dw1.begin(), dw1.end(), 0.0f);
      std::fill(dw2.begin(), dw2.end(), 0.0f);
      const FastGradsRef grads{dw0.data(), dw1.data(), dw2.data()};
      for (int64_t t0 = c0; t0 < c1; t0 += tile) {
        const int64_t n = std::min(tile, c1 - t0);
        cpu::LactKeyValueLr(c, w, h.ptr() + t0 * D, n, kv.data(), lr.data());
        cpu::AccumulateFastWeightGrads(c, kv.data(), lr.data(), n, fast, grads, &ws);
      }
      cpu::UpdateFastWeights(c, grads, {w.w0, w.w1, w.w2}, state->w0.ptr(), state->w1.ptr(), state->w2.ptr());
    }
    for (int64_t t0 = c0; t0 < c1; t0 += tile) {
      const int64_t n = std::min(tile, c1 - t0);
      cpu::LactQuery(c, w, h.ptr() + t0 * D, n, q.data());
      cpu::ApplyFastWeights(c, q.data(), n, fast, o.data(), &ws);
      for (int64_t head = 0; head < ht; ++head) {
        cpu::RmsNormRows(o.data() + head * dh, D, n, dh, w.o_norm, o.data() + head * dh, D);
      }
      cpu::Linear(o.data(), D, n, D, w.o_proj, D, acc->ptr() + t0 * D, D, 1.0f);
    }
  }
}

// x += acc; x += SwiGLU-MLP(rmsnorm(x, norm2)), tile by tile.
void ResidualMlp(const ModelConfig& c, const LayerWeights& w, int64_t tile, const Tensor& acc, Tensor* x) {
  const int64_t L = x->dim(0), D = c.d_model, F = c.mlp_hidden;
  std::vector<float> g(tile * D), gate(tile * F), up(tile * F);
  for (int64_t t0 = 0; t0 < L; t0 += tile) {
    const int64_t n = std::min(tile, L - t0);
    float* xt = x->ptr() + t0 * D;
    const float* at = acc.ptr() + t0 * D;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * D; ++i) xt[i] += at[i];
    cpu::RmsNormRows(xt, D, n, D, w.norm2, g.data(), D);
    cpu::Linear(g.data(), D, n, D, w.mlp_gate, F, gate.data(), F);
    cpu::Linear(g.data(), D, n, D, w.mlp_up, F, up.data(), F);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * F; ++i) gate[i] = cpu::Silu(gate[i]) * up[i];
    cpu::Linear(gate.data(), F, n, F, w.mlp_down, D, xt, D, 1.0f);
  }
}

}  // namespace

void RunBlockCpu(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile, Tensor* x,
                 BlockBuffers* buffers, LayerState* state) {
  const int64_t L = x->dim(0), D = c.d_model;
  buffers->h.shape = {L, D};
  buffers->h.data.resize(L * D);
  buffers->acc.shape = {L, D};
  buffers->acc.data.resize(L * D);
  cpu::RmsNormRows(x->ptr(), D, L, D, w.norm1, buffers->h.ptr(), D);

  MambaState mamba[2];
  mamba[kForward] = state->mamba[kForward];  // zero for a context, the context's for a query
  mamba[kBackward] = state->mamba[kBackward];
  std::fill(mamba[kBackward].ssm.data.begin(), mamba[kBackward].ssm.data.end(), 0.0f);
  std::fill(mamba[kBackward].conv.data.begin(), mamba[kBackward].conv.data.end(), 0.0f);
  BiMamba(c, w, tile, buffers->h, &buffers->acc, mamba);

  if (is_context) {
    state->mamba[kForward] = std::move(mamba[kForward]);
    state->mamba[kBackward] = std::move(mamba[kBackward]);
    std::copy_n(w.w0, state->w0.size(), state->w0.ptr());
    std::copy_n(w.w1, state->w1.size(), state->w1.ptr());
    std::copy_n(w.w2, state->w2.size(), state->w2.ptr());
  }
  Lact(c, w, is_context, tile, buffers->h, &buffers->acc, state);
  ResidualMlp(c, w, tile, buffers->acc, x);
}

}  // namespace lact
