#include "worker/cuda/cuda_mlp_ops.h"

#include "common/status_macros.h"
#include "kernels/cuda/ops.h"

namespace lact {

absl::Status CudaMlpOps::Allocate(int64_t tile) {
  const int64_t F = c_.mlp_hidden;
  LACT_RETURN_IF_ERROR(AllocateFloats({{&gate_, tile * F}, {&up_, tile * F}}));
  return AllocateBf16(ctx_.precision(), {{&gate16_, tile * F}});
}

absl::Status CudaMlpOps::Residual(const LayerWeights& w, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  float* x = rows_.x.get() + first * D;
  float* normed = rows_.h.get() + first * D;  // h is free once the block's mixers have run
  LACT_RETURN_IF_ERROR(cuda::AddRmsNormRows(ctx_.stream(), x, D, rows_.acc.get() + first * D, D, n,
                                            D, weights_(w.norm2), normed, D,
                                            rows_.NormedBf16(first)));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first), D, n, D,
                                    weights_.Matrix(w.mlp_gate), F, gate_.get(), F));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first), D, n, D,
                                    weights_.Matrix(w.mlp_up), F, up_.get(), F));
  LACT_RETURN_IF_ERROR(cuda::SiluMul(ctx_.stream(), gate_.get(), up_.get(), n * F, Bf16(gate16_)));
  return cuda::Linear(ctx_, {gate_.get(), Bf16(gate16_)}, F, n, F, weights_.Matrix(w.mlp_down), D,
                      x, D, 1.0f);
}

}  // namespace lact
