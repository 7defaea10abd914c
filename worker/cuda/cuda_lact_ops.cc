#include "worker/cuda/cuda_lact_ops.h"

#include <cmath>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/newton_schulz.h"

namespace lact {
namespace {

// The three fast-weight matrices of one layer, [H_t, rows, cols] each.
struct FastShape {
  int64_t heads, dh, hidden;
  int64_t mat() const { return dh * hidden; }
  int64_t size() const { return heads * mat(); }
  // w1 is [dh, d_h]; w0 and w2 are [d_h, dh].
  int64_t rows(int m) const { return m == 1 ? dh : hidden; }
  int64_t cols(int m) const { return m == 1 ? hidden : dh; }
};

FastShape ShapeOf(const ModelConfig& c) { return {c.ttt_heads(), c.ttt.head_dim, c.fast_hidden()}; }

}  // namespace

absl::Status CudaLactOps::Allocate(int64_t tile) {
  const int64_t T = tile, D = c_.d_model, ht = c_.ttt_heads(), hidden = c_.fast_hidden();
  const int64_t fast = ShapeOf(c_).size();
  LACT_RETURN_IF_ERROR(AllocateTiles(ctx_.precision(), {{&kv_, T * 2 * D},
                                                        {&q_, T * D},
                                                        {&o_, T * D},
                                                        {&g_, ht * T * hidden},
                                                        {&u_, ht * T * hidden},
                                                        {&hidden_grad_, ht * T * hidden}}));
  LACT_RETURN_IF_ERROR(
      AllocateFloats({{&lr_, T * 3 * ht}, {&fast_, 3 * fast}, {&grads_, 3 * fast}}));
  return AllocateBf16(ctx_.precision(), {{&fast16_, 3 * fast}});
}

cuda::GemmInput CudaLactOps::FastWeight(int m) const {
  const int64_t offset = m * ShapeOf(c_).size();
  return {fast_.get() + offset, fast16_.get() != nullptr ? Bf16(fast16_) + offset : nullptr};
}

absl::Status CudaLactOps::Load(const LayerWeights& w, const LayerState* retained) {
  const int64_t size = ShapeOf(c_).size();
  const float* initial[3] = {w.w0, w.w1, w.w2};
  for (int m = 0; m < 3; ++m) {
    float* dst = fast_.get() + m * size;
    if (retained == nullptr) {
      LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, weights_(initial[m]), size * sizeof(float),
                                                cudaMemcpyDeviceToDevice, stream()));
      continue;
    }
    const Tensor* from[3] = {&retained->w0, &retained->w1, &retained->w2};
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, from[m]->ptr(), size * sizeof(float),
                                              cudaMemcpyHostToDevice, stream()));
  }
  if (fast16_.get() != nullptr) {
    LACT_RETURN_IF_ERROR(cuda::RoundToBf16(stream(), fast_.get(), 3 * size, Bf16(fast16_)));
  }
  return ctx_.Synchronize();
}

absl::Status CudaLactOps::Store(LayerState* state) {
  const int64_t size = ShapeOf(c_).size();
  LACT_RETURN_IF_ERROR(ctx_.Download(fast_.get(), size, state->w0.ptr()));
  LACT_RETURN_IF_ERROR(ctx_.Download(fast_.get() + size, size, state->w1.ptr()));
  return ctx_.Download(fast_.get() + 2 * size, size, state->w2.ptr());
}

absl::Status CudaLactOps::ZeroGrads() {
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(grads_.get(), 0, grads_.size() * sizeof(float), stream()));
  return absl::OkStatus();
}

absl::Status CudaLactOps::Accumulate(const LayerWeights& w, int64_t first, int64_t n) {
  const FastShape f = ShapeOf(c_);
  const int64_t D = c_.d_model, ht = f.heads, dh = f.dh, hidden = f.hidden, mat = f.mat();
  const int64_t per_head = n * hidden;
  const cuda::GemmInput w0 = FastWeight(0), w1 = FastWeight(1), w2 = FastWeight(2);
  float *d0 = grads_.get(), *d1 = d0 + f.size(), *d2 = d1 + f.size();
  const float shift = static_cast<float>(c_.ttt.base_lr + std::log(-std::expm1(-c_.ttt.base_lr)));
  const cuda::GemmInput rows = rows_.NormedRows(first);
  const cuda::Values kv = kv_.at(), k = kv, v = kv.Offset(D);
  const cuda::Values g = g_.at(), u = u_.at(), hidden_grad = hidden_grad_.at();
  float* lr = lr_.get();
  const cuda::CudaContext& ctx = ctx_;
  LACT_RETURN_IF_ERROR(
      cuda::Linear(ctx, rows, D, n, D, weights_.Matrix(w.qkv).Offset(D * D), 2 * D, kv, 2 * D));
  LACT_RETURN_IF_ERROR(cuda::SiluL2NormGroups(stream(), kv, 2 * D, n, 2 * D, ht, dh));
  LACT_RETURN_IF_ERROR(
      cuda::Linear(ctx, rows, D, n, D, weights_.Matrix(w.lr_w), 3 * ht, lr, 3 * ht));
  LACT_RETURN_IF_ERROR(
      cuda::SoftplusBias(stream(), lr, 3 * ht, n, 3 * ht, weights_(w.lr_b), shift, lr, 3 * ht));
  // Per head: G = K w0^T, U = K w2^T, Hd = V w1 (heads `dh` columns apart).
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, true, n, hidden, dh, 1.0f, k, 2 * D, dh,
                                                w0, dh, mat, 0.0f, g, hidden, per_head, ht));
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, true, n, hidden, dh, 1.0f, k, 2 * D, dh,
                                                w2, dh, mat, 0.0f, u, hidden, per_head, ht));
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, false, n, hidden, dh, 1.0f, v, 2 * D,
                                                dh, w1, hidden, mat, 0.0f, hidden_grad, hidden,
                                                per_head, ht));
  // In place: g <- LR0 dG, u <- LR1 Hd, hidden_grad <- LR2 dU.
  LACT_RETURN_IF_ERROR(
      cuda::LactGradFactors(stream(), g, u, hidden_grad, ht, n, hidden, lr, 3 * ht));
  // dw1 += V^T (LR1 Hd), dw0 += (LR0 dG)^T K, dw2 += (LR2 dU)^T K.
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, true, false, dh, hidden, n, 1.0f, v, 2 * D, dh,
                                                u, hidden, per_head, 1.0f, d1, hidden, mat, ht));
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, true, false, hidden, dh, n, 1.0f, g, hidden,
                                                per_head, k, 2 * D, dh, 1.0f, d0, dh, mat, ht));
  return cuda::GemmStridedBatched(ctx, true, false, hidden, dh, n, 1.0f, hidden_grad, hidden,
                                  per_head, k, 2 * D, dh, 1.0f, d2, dh, mat, ht);
}

absl::Status CudaLactOps::StartAllReduce() {
  if (grads_allreduce_ == nullptr) {
    return absl::InternalError("no gradient all-reduce in a group of one");
  }
  return grads_allreduce_->Start(grads_.get(), grads_.size(), stream());
}

absl::Status CudaLactOps::FinishAllReduce() {
  if (grads_allreduce_ == nullptr) {
    return absl::InternalError("no gradient all-reduce in a group of one");
  }
  return grads_allreduce_->Finish(stream());
}

absl::Status CudaLactOps::Update(const LayerWeights& w) {
  const FastShape f = ShapeOf(c_);
  const float* initial[3] = {w.w0, w.w1, w.w2};
  for (int m = 0; m < 3; ++m) {
    float* dw = grads_.get() + m * f.size();
    if (c_.ttt.muon_steps > 0 || c_.ttt.normalize_update) {  // steps 0: only the norm
      LACT_RETURN_IF_ERROR(
          cuda::NewtonSchulz(ctx_, dw, f.heads, f.rows(m), f.cols(m), c_.ttt.muon_steps, &muon_));
    }
    LACT_RETURN_IF_ERROR(cuda::WeightNormUpdate(
        stream(), fast_.get() + m * f.size(), dw, weights_(initial[m]), f.heads * f.rows(m),
        f.cols(m), fast16_.get() != nullptr ? Bf16(fast16_) + m * f.size() : nullptr));
  }
  return absl::OkStatus();
}

absl::Status CudaLactOps::Apply(const LayerWeights& w, int64_t first, int64_t n) {
  const FastShape f = ShapeOf(c_);
  const int64_t D = c_.d_model, ht = f.heads, dh = f.dh, hidden = f.hidden, mat = f.mat();
  const int64_t per_head = n * hidden;
  const cuda::GemmInput w0 = FastWeight(0), w1 = FastWeight(1), w2 = FastWeight(2);
  const cuda::Values q = q_.at(), o = o_.at(), g = g_.at(), u = u_.at();
  const cuda::CudaContext& ctx = ctx_;
  LACT_RETURN_IF_ERROR(
      cuda::Linear(ctx, rows_.NormedRows(first), D, n, D, weights_.Matrix(w.qkv), D, q, D));
  LACT_RETURN_IF_ERROR(cuda::SiluL2NormGroups(stream(), q, D, n, D, ht, dh));
  // Per head: o = (silu(Q w0^T) * (Q w2^T)) w1^T.
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, true, n, hidden, dh, 1.0f, q, D, dh, w0,
                                                dh, mat, 0.0f, g, hidden, per_head, ht));
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, true, n, hidden, dh, 1.0f, q, D, dh, w2,
                                                dh, mat, 0.0f, u, hidden, per_head, ht));
  LACT_RETURN_IF_ERROR(cuda::SiluMul(stream(), g, u, ht * per_head));
  LACT_RETURN_IF_ERROR(cuda::GemmStridedBatched(ctx, false, true, n, dh, hidden, 1.0f, g, hidden,
                                                per_head, w1, hidden, mat, 0.0f, o, D, dh, ht));
  // Each head's dh columns normed in place: o as [n * ht, dh] rows.
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), o, dh, n * ht, dh, weights_(w.o_norm), o, dh));
  return cuda::Linear(ctx, o, D, n, D, weights_.Matrix(w.o_proj), D, rows_.acc.get() + first * D, D,
                      1.0f);
}

}  // namespace lact
