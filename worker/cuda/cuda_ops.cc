#include "worker/cuda/cuda_ops.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace lact {

using cuda::DeviceBuffer;

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::Create(
    const Model& model, const ModelConfig& c, cuda::CudaContext& ctx, const DeviceWeights& weights,
    int64_t tokens, int64_t tile, DeviceAllReduce* grads, cuda::SsdMath scan_math) {
  auto ops = std::unique_ptr<CudaOps>(new CudaOps(model, c, ctx, weights, tokens, tile, grads));
  ops->ssd_ = cuda::SsdWorkspace(0, scan_math);
  const int64_t L = tokens, T = ops->tile(), D = c.d_model, di = c.d_inner();
  const int64_t C = c.conv_channels(), R = c.in_proj_rows(), F = c.mlp_hidden;
  const int64_t hs = c.ssm_heads(), ht = c.ttt_heads(), hidden = c.fast_hidden();
  const int64_t fast = ht * hidden * c.ttt.head_dim;
  const int64_t history = int64_t{c.ssm.conv_width - 1} * C;
  CudaOps& o = *ops;
  struct {
    DeviceBuffer* buffer;
    int64_t floats;
  } plan[] = {
      {&o.x_, L * D},           {&o.h_, L * D},
      {&o.acc_, L * D},         {&o.proj_, T * R},
      {&o.xbc_, T * C},         {&o.dt_, T * hs},
      {&o.y_, T * di},          {&o.ssm_, hs * c.ssm.head_dim * c.ssm.d_state},
      {&o.conv_, history},      {&o.conv_scratch_, history},
      {&o.log_decay_, hs},      {&o.kv_, T * 2 * D},
      {&o.lr_, T * 3 * ht},     {&o.q_, T * D},
      {&o.o_, T * D},           {&o.g_, ht * T * hidden},
      {&o.u_, ht * T * hidden}, {&o.hidden_grad_, ht * T * hidden},
      {&o.fast_, 3 * fast},     {&o.grads_, 3 * fast},
      {&o.gate_, T * F},        {&o.up_, T * F},
  };
  for (auto& p : plan) {
    LACT_ASSIGN_OR_RETURN(*p.buffer, DeviceBuffer::Allocate(static_cast<size_t>(p.floats)));
  }
  LACT_ASSIGN_OR_RETURN(o.io_, TileIo::Create(ctx));
  if (ctx.precision() == cuda::Precision::kBf16) {
    for (auto [buffer, values] :
         {std::pair{&o.h16_, L * D}, std::pair{&o.y16_, T * di}, std::pair{&o.gate16_, T * F},
          std::pair{&o.kv16_, T * 2 * D}, std::pair{&o.q16_, T * D},
          std::pair{&o.g16_, ht * T * hidden}, std::pair{&o.o16_, T * D},
          std::pair{&o.factors16_, 3 * ht * T * hidden}}) {
      LACT_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(static_cast<size_t>((values + 1) / 2)));
    }
  }
  return ops;
}

absl::StatusOr<const __nv_bfloat16*> CudaOps::RoundOnce(const float* x, int64_t n,
                                                        const cuda::DeviceBuffer& into) {
  if (into.get() == nullptr) return nullptr;
  LACT_RETURN_IF_ERROR(cuda::RoundToBf16(stream(), x, n, Bf16(into)));
  return Bf16(into);
}

__nv_bfloat16* CudaOps::NormedBf16(int64_t first) const {
  return h16_.get() == nullptr ? nullptr : Bf16(h16_) + first * c_.d_model;
}

cuda::GemmInput CudaOps::NormedRows(int64_t first) const {
  return {h_.get() + first * c_.d_model, NormedBf16(first)};
}

// The tokens go up tile by tile through TileIo, each tile embedded (or
// copied into x) while the next is staged and sent.
absl::Status CudaOps::LoadTokens(Tensor tokens) {
  const int64_t L = tokens.dim(0), D = c_.d_model, in = c_.input_width();
  return io_->Upload(tokens.ptr(), L, in, [&](const float* rows, int64_t first, int64_t n) {
    float* x = x_.get() + first * D;
    if (model_.embed() == nullptr) {
      LACT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(x, rows, n * D * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
      return absl::OkStatus();
    }
    return cuda::Linear(ctx_, rows, in, n, in, weights_.Matrix(model_.embed()), D, x, D);
  });
}

// The rows come down through TileIo: the host copies one piece out while
// the next is made and sent.
absl::Status CudaOps::OutputRows(int64_t first, int64_t n, float* out) {
  const int64_t D = c_.d_model, out_width = c_.output_width();
  float* normed = h_.get() + first * D;  // h is free once the block's mixers have run
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), x_.get() + first * D, D, n, D,
                                         weights_(model_.final_norm()), normed, D,
                                         model_.head() != nullptr ? NormedBf16(first) : nullptr));
  return io_->Download(
      out, n, out_width,
      [&](float* scratch, int64_t piece, int64_t rows) -> absl::StatusOr<const float*> {
        if (model_.head() == nullptr) return normed + piece * D;
        LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, NormedRows(first + piece), D, rows, D,
                                          weights_.Matrix(model_.head()), out_width, scratch,
                                          out_width));
        return scratch;
      });
}

absl::Status CudaOps::ReadRows(Activation a, int64_t first, int64_t n, float* out) {
  const DeviceBuffer& rows = a == Activation::kResidual ? x_ : a == Activation::kNormed ? h_ : acc_;
  return ctx_.Download(rows.get() + first * c_.d_model, n * c_.d_model, out);
}

absl::Status CudaOps::BeginBlock(const LayerWeights& w) {
  const int64_t L = tokens(), D = c_.d_model;
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), x_.get(), D, L, D, weights_(w.norm1), h_.get(),
                                         D, NormedBf16(0)));
  LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(acc_.get(), 0, acc_.size() * sizeof(float), stream()));
  return absl::OkStatus();
}

absl::Status CudaOps::ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  float* x = x_.get() + first * D;
  float* normed = h_.get() + first * D;  // h is free once the block's mixers have run
  LACT_RETURN_IF_ERROR(cuda::AddRmsNormRows(stream(), x, D, acc_.get() + first * D, D, n, D,
                                            weights_(w.norm2), normed, D, NormedBf16(first)));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, NormedRows(first), D, n, D, weights_.Matrix(w.mlp_gate),
                                    F, gate_.get(), F));
  LACT_RETURN_IF_ERROR(
      cuda::Linear(ctx_, NormedRows(first), D, n, D, weights_.Matrix(w.mlp_up), F, up_.get(), F));
  LACT_RETURN_IF_ERROR(cuda::SiluMul(stream(), gate_.get(), up_.get(), n * F, Bf16(gate16_)));
  return cuda::Linear(ctx_, {gate_.get(), Bf16(gate16_)}, F, n, F, weights_.Matrix(w.mlp_down), D,
                      x, D, 1.0f);
}

}  // namespace lact
