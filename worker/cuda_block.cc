#include "worker/cuda_block.h"

#include <algorithm>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace lact {

using cuda::DeviceBuffer;

absl::Status DeviceWeights::Upload(const Model& model, cuda::CudaContext& ctx) {
  for (const auto& [name, t] : model.tensors()) {
    LACT_ASSIGN_OR_RETURN(DeviceBuffer b, ctx.Upload(t.ptr(), t.size()));
    device_of_[t.ptr()] = b.get();
    buffers_[t.ptr()] = std::move(b);
  }
  return ctx.Synchronize();
}

absl::StatusOr<std::unique_ptr<CudaBlock>> CudaBlock::Create(const ModelConfig& c, cuda::CudaContext& ctx,
                                                             const DeviceWeights& weights, const CudaShard& shard,
                                                             int64_t tokens, int64_t tile) {
  auto block = std::unique_ptr<CudaBlock>(new CudaBlock(c, ctx, weights, shard));
  block->L_ = tokens;
  block->tile_ = tile = std::max<int64_t>(1, std::min(tile, tokens));
  const int64_t L = tokens, D = c.d_model, di = c.d_inner(), C = c.conv_channels(), R = c.in_proj_rows();
  const int64_t hs = c.ssm_heads(), ht = c.ttt_heads(), dhh = c.fast_hidden(), F = c.mlp_hidden;
  const int64_t fast = ht * dhh * c.ttt.head_dim;
  const int64_t history = int64_t{c.ssm.conv_width - 1} * C;
  struct {
    DeviceBuffer* buffer;
    int64_t floats;
  } plan[] = {
      {&block->x_, L * D},         {&block->h_, L * D},         {&block->acc_, L * D},
      {&block->rev_, tile * D},    {&block->proj_, tile * R},   {&block->xbc_, tile * C},
      {&block->dt_, tile * hs},    {&block->y_, tile * di},     {&block->a_, tile * D},
      {&block->ssm_, hs * c.ssm.head_dim * c.ssm.d_state},      {&block->conv_, history},
      {&block->conv_scratch_, history},                         {&block->log_decay_, hs},
      {&block->kv_, tile * 2 * D}, {&block->lr_, tile * 3 * ht}, {&block->q_, tile * D},
      {&block->o_, tile * D},      {&block->g_, ht * tile * dhh}, {&block->u_, ht * tile * dhh},
      {&block->dh_, ht * tile * dhh}, {&block->fast_, 3 * fast},  {&block->grads_, 3 * fast},
      {&block->gate_, tile * F},   {&block->up_, tile * F},
  };
  for (auto& p : plan) {
    LACT_ASSIGN_OR_RETURN(*p.buffer, DeviceBuffer::Allocate(static_cast<size_t>(p.floats)));
  }
  return block;
}

absl::Status CudaBlock::CheckCancelled() const {
  return shard_.Cancelled() ? absl::CancelledError("the job was cancelled") : absl::OkStatus();
}

absl::Status CudaBlock::Run(const LayerWeights& w, bool is_context, LayerState* state) {
  const int64_t D = c_.d_model;
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), x_.get(), D, L_, D, weights_(w.norm1), h_.get(), D));
  LACT_RETURN_IF_ERROR(LoadFastWeights(w, is_context, *state));
  // Chunk 0's gradients first, so that their all-reduce overlaps the scans.
  bool reducing = false;
  if (is_context) {
    LACT_RETURN_IF_ERROR(LocalGrads(w, 0));
    if (shard_.distributed()) {
      LACT_RETURN_IF_ERROR(shard_.grads->Start(grads_.get(), grads_.size(), stream()));
      reducing = true;
    }
  }
  const absl::Status scans = BiMamba(w, is_context, state);
  if (reducing) {
    const absl::Status reduced = shard_.grads->Finish(stream());
    LACT_RETURN_IF_ERROR(scans);
    LACT_RETURN_IF_ERROR(reduced);
  }
  LACT_RETURN_IF_ERROR(scans);
  if (is_context) LACT_RETURN_IF_ERROR(UpdateFastWeights(w));
  LACT_RETURN_IF_ERROR(ApplyFastWeights(w, 0, is_context));
  for (int64_t k = 1; k < Chunks(is_context); ++k) {
    LACT_RETURN_IF_ERROR(CheckCancelled());
    LACT_RETURN_IF_ERROR(LocalGrads(w, k));
    if (shard_.distributed()) {
      LACT_RETURN_IF_ERROR(shard_.grads->Start(grads_.get(), grads_.size(), stream()));
      LACT_RETURN_IF_ERROR(shard_.grads->Finish(stream()));  // nothing to overlap with
    }
    LACT_RETURN_IF_ERROR(UpdateFastWeights(w));
    LACT_RETURN_IF_ERROR(ApplyFastWeights(w, k, is_context));
  }
  LACT_RETURN_IF_ERROR(ResidualMlp(w));
  if (is_context) LACT_RETURN_IF_ERROR(DownloadFastWeights(state));
  LACT_RETURN_IF_ERROR(ctx_.Synchronize());
  return CheckCancelled();
}

absl::Status CudaBlock::ResidualMlp(const LayerWeights& w) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  LACT_RETURN_IF_ERROR(cuda::AddInPlace(stream(), x_.get(), acc_.get(), L_ * D));
  for (int64_t t0 = 0; t0 < L_; t0 += tile_) {
    LACT_RETURN_IF_ERROR(CheckCancelled());
    const int64_t n = std::min(tile_, L_ - t0);
    float* xt = x_.get() + t0 * D;
    float* g = h_.get() + t0 * D;  // h is free once the block's mixers have run
    LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), xt, D, n, D, weights_(w.norm2), g, D));
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, g, D, n, D, weights_(w.mlp_gate), F, gate_.get(), F));
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, g, D, n, D, weights_(w.mlp_up), F, up_.get(), F));
    LACT_RETURN_IF_ERROR(cuda::SiluMul(stream(), gate_.get(), up_.get(), n * F));
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, gate_.get(), F, n, F, weights_(w.mlp_down), D, xt, D, 1.0f));
  }
  return absl::OkStatus();
}

}  // namespace lact
