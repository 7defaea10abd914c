// The LaCT half of a CUDA block (SPEC.md section 6): per global chunk, the
// fast-weight gradient sums over this shard's tokens in it (batched over
// heads with strided GEMMs), the update (Newton-Schulz, weight norm), and the
// updated fast weights applied to those tokens: acc += o @ o_proj^T.
#include <algorithm>
#include <cmath>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/newton_schulz.h"
#include "kernels/cuda/ops.h"
#include "worker/cuda_block.h"

namespace lact {
namespace {

// The three fast-weight matrices of one layer, [H_t, rows, cols] each.
struct FastShape {
  int64_t heads, dh, dhh;
  int64_t mat() const { return dh * dhh; }
  int64_t size() const { return heads * mat(); }
  int64_t rows(int m) const { return m == 1 ? dh : dhh; }  // w1 is [dh, d_h], w0 and w2 [d_h, dh]
  int64_t cols(int m) const { return m == 1 ? dhh : dh; }
};

FastShape ShapeOf(const ModelConfig& c) { return {c.ttt_heads(), c.ttt.head_dim, c.fast_hidden()}; }

}  // namespace

int64_t CudaBlock::Chunks(bool is_context) const {
  const int64_t chunk = is_context && c_.ttt.chunk_tokens > 0 ? c_.ttt.chunk_tokens : shard_.total;
  return (shard_.total + chunk - 1) / chunk;
}

std::pair<int64_t, int64_t> CudaBlock::LocalRange(int64_t k, bool is_context) const {
  const int64_t chunk = is_context && c_.ttt.chunk_tokens > 0 ? c_.ttt.chunk_tokens : shard_.total;
  const int64_t lo = std::clamp(k * chunk - shard_.begin, int64_t{0}, L_);
  const int64_t hi = std::clamp((k + 1) * chunk - shard_.begin, int64_t{0}, L_);
  return {lo, hi};
}

absl::Status CudaBlock::LoadFastWeights(const LayerWeights& w, bool is_context, const LayerState& state) {
  const int64_t size = ShapeOf(c_).size();
  const float* initial[3] = {w.w0, w.w1, w.w2};
  const Tensor* retained[3] = {&state.w0, &state.w1, &state.w2};
  for (int m = 0; m < 3; ++m) {
    float* dst = fast_.get() + m * size;
    if (is_context) {
      LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, weights_(initial[m]), size * sizeof(float),
                                                cudaMemcpyDeviceToDevice, stream()));
    } else {
      LACT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst, retained[m]->ptr(), size * sizeof(float), cudaMemcpyHostToDevice, stream()));
    }
  }
  return ctx_.Synchronize();
}

absl::Status CudaBlock::LocalGrads(const LayerWeights& w, int64_t chunk) {
  const FastShape f = ShapeOf(c_);
  const int64_t D = c_.d_model, ht = f.heads, dh = f.dh, dhh = f.dhh, mat = f.mat();
  const float *w0 = fast_.get(), *w1 = w0 + f.size(), *w2 = w1 + f.size();
  float *d0 = grads_.get(), *d1 = d0 + f.size(), *d2 = d1 + f.size();
  LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_.get(), 0, grads_.size() * sizeof(float), stream()));
  const float shift = static_cast<float>(c_.ttt.base_lr + std::log(-std::expm1(-c_.ttt.base_lr)));
  const auto [lo, hi] = LocalRange(chunk, /*is_context=*/true);
  for (int64_t t0 = lo; t0 < hi; t0 += tile_) {
    LACT_RETURN_IF_ERROR(CheckCancelled());
    const int64_t n = std::min(tile_, hi - t0), per_head = n * dhh;
    const float* rows = h_.get() + t0 * D;
    float *kv = kv_.get(), *lr = lr_.get(), *g = g_.get(), *u = u_.get(), *dH = dh_.get();
    const float *k = kv, *v = kv + D;
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows, D, n, D, weights_(w.qkv) + D * D, 2 * D, kv, 2 * D));
    LACT_RETURN_IF_ERROR(cuda::SiluRows(stream(), kv, 2 * D, n, 2 * D));
    LACT_RETURN_IF_ERROR(cuda::L2NormGroups(stream(), kv, 2 * D, n, ht, dh));
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows, D, n, D, weights_(w.lr_w), 3 * ht, lr, 3 * ht));
    LACT_RETURN_IF_ERROR(cuda::SoftplusBias(stream(), lr, 3 * ht, n, 3 * ht, weights_(w.lr_b), shift, lr, 3 * ht));
    // Per head: G = K w0^T, U = K w2^T, dH = V w1 (heads `dh` columns apart).
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, true, n, dhh, dh, 1.0f, k, 2 * D, dh, w0, dh, mat,
                                                  0.0f, g, dhh, per_head, ht));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, true, n, dhh, dh, 1.0f, k, 2 * D, dh, w2, dh, mat,
                                                  0.0f, u, dhh, per_head, ht));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, false, n, dhh, dh, 1.0f, v, 2 * D, dh, w1, dhh, mat,
                                                  0.0f, dH, dhh, per_head, ht));
    LACT_RETURN_IF_ERROR(cuda::LactGradFactors(stream(), g, u, dH, ht, n, dhh, lr, 3 * ht));
    // dw1 += V^T (LR1 Hd), dw0 += (LR0 dG)^T K, dw2 += (LR2 dU)^T K.
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, true, false, dh, dhh, n, 1.0f, v, 2 * D, dh, u, dhh, per_head,
                                                  1.0f, d1, dhh, mat, ht));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, true, false, dhh, dh, n, 1.0f, g, dhh, per_head, k, 2 * D, dh,
                                                  1.0f, d0, dh, mat, ht));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, true, false, dhh, dh, n, 1.0f, dH, dhh, per_head, k, 2 * D,
                                                  dh, 1.0f, d2, dh, mat, ht));
  }
  return absl::OkStatus();
}

absl::Status CudaBlock::UpdateFastWeights(const LayerWeights& w) {
  const FastShape f = ShapeOf(c_);
  const float* initial[3] = {w.w0, w.w1, w.w2};
  for (int m = 0; m < 3; ++m) {
    float* dw = grads_.get() + m * f.size();
    if (c_.ttt.muon_steps > 0) {
      LACT_RETURN_IF_ERROR(cuda::NewtonSchulz(ctx_, dw, f.heads, f.rows(m), f.cols(m), c_.ttt.muon_steps, &muon_));
    }
    LACT_RETURN_IF_ERROR(cuda::WeightNormUpdate(stream(), fast_.get() + m * f.size(), dw, weights_(initial[m]),
                                                f.heads * f.rows(m), f.cols(m)));
  }
  return absl::OkStatus();
}

absl::Status CudaBlock::ApplyFastWeights(const LayerWeights& w, int64_t chunk, bool is_context) {
  const FastShape f = ShapeOf(c_);
  const int64_t D = c_.d_model, ht = f.heads, dh = f.dh, dhh = f.dhh, mat = f.mat();
  const float *w0 = fast_.get(), *w1 = w0 + f.size(), *w2 = w1 + f.size();
  const auto [lo, hi] = LocalRange(chunk, is_context);
  for (int64_t t0 = lo; t0 < hi; t0 += tile_) {
    LACT_RETURN_IF_ERROR(CheckCancelled());
    const int64_t n = std::min(tile_, hi - t0), per_head = n * dhh;
    float *q = q_.get(), *o = o_.get(), *g = g_.get(), *u = u_.get();
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, h_.get() + t0 * D, D, n, D, weights_(w.qkv), D, q, D));
    LACT_RETURN_IF_ERROR(cuda::SiluRows(stream(), q, D, n, D));
    LACT_RETURN_IF_ERROR(cuda::L2NormGroups(stream(), q, D, n, ht, dh));
    // Per head: o = (silu(Q w0^T) * (Q w2^T)) w1^T.
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, true, n, dhh, dh, 1.0f, q, D, dh, w0, dh, mat, 0.0f, g,
                                                  dhh, per_head, ht));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, true, n, dhh, dh, 1.0f, q, D, dh, w2, dh, mat, 0.0f, u,
                                                  dhh, per_head, ht));
    LACT_RETURN_IF_ERROR(cuda::SiluMul(stream(), g, u, ht * per_head));
    LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx_, false, true, n, dh, dhh, 1.0f, g, dhh, per_head, w1, dhh, mat,
                                                  0.0f, o, D, dh, ht));
    for (int64_t head = 0; head < ht; ++head) {
      float* oh = o + head * dh;
      LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), oh, D, n, dh, weights_(w.o_norm), oh, D));
    }
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, o, D, n, D, weights_(w.o_proj), D, acc_.get() + t0 * D, D, 1.0f));
  }
  return absl::OkStatus();
}

absl::Status CudaBlock::DownloadFastWeights(LayerState* state) {
  const int64_t size = ShapeOf(c_).size();
  LACT_RETURN_IF_ERROR(ctx_.Download(fast_.get(), size, state->w0.ptr()));
  LACT_RETURN_IF_ERROR(ctx_.Download(fast_.get() + size, size, state->w1.ptr()));
  return ctx_.Download(fast_.get() + 2 * size, size, state->w2.ptr());
}

}  // namespace lact
