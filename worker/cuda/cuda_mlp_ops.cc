#include "worker/cuda/cuda_mlp_ops.h"

#include "common/status_macros.h"
#include "kernels/cuda/kernels.h"

namespace lact {

absl::Status CudaMlpOps::Allocate(int64_t tile) {
  const int64_t F = c_.mlp_hidden;
  return AllocateTiles(ctx_.precision(), {{&gate_, tile * F}, {&up_, tile * F}});
}

absl::Status CudaMlpOps::Residual(const LayerWeights& w, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  float* x = rows_.x.get() + first * D;
  // h is free once the block's mixers have run.
  LACT_RETURN_IF_ERROR(cuda::AddRmsNormRows(ctx_.stream(), x, D, rows_.acc.get() + first * D, D, n,
                                            D, weights_(w.norm2), rows_.NormedF32(first), D,
                                            rows_.NormedBf16(first)));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first), D, n, D,
                                    weights_.Matrix(w.mlp_gate), F, gate_.at(), F));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first), D, n, D,
                                    weights_.Matrix(w.mlp_up), F, up_.at(), F));
  LACT_RETURN_IF_ERROR(cuda::SiluMul(ctx_.stream(), gate_.at(), up_.at(), n * F));
  return cuda::Linear(ctx_, gate_.at(), F, n, F, weights_.Matrix(w.mlp_down), D, x, D, 1.0f);
}

}  // namespace lact
