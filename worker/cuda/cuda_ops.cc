#include "worker/cuda/cuda_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace lact {

using cuda::DeviceBuffer;

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::Create(
    const Model& model, const ModelConfig& c, cuda::CudaContext& ctx, const DeviceWeights& weights,
    int64_t tokens, int64_t tile, DeviceAllReduce* grads, cuda::SsdMath scan_math) {
  auto ops = std::unique_ptr<CudaOps>(new CudaOps(model, c, ctx, weights, tokens, tile, grads));
  const int64_t L = tokens, D = c.d_model;
  CudaActivations& rows = ops->rows_;
  rows.width = D;
  // In bf16 precision the norms write h16 alone; h then holds only the
  // final norm's rows of a model without a head (its output).
  const bool float_h = ctx.precision() == cuda::Precision::kFp32 || model.head() == nullptr;
  LACT_RETURN_IF_ERROR(
      AllocateFloats({{&rows.x, L * D}, {&rows.h, float_h ? L * D : 0}, {&rows.acc, L * D}}));
  LACT_RETURN_IF_ERROR(AllocateBf16(ctx.precision(), {{&rows.h16, L * D}}));
  LACT_RETURN_IF_ERROR(ops->mixer_.Allocate(ops->tile(), scan_math));
  LACT_RETURN_IF_ERROR(ops->lact_.Allocate(ops->tile()));
  LACT_RETURN_IF_ERROR(ops->mlp_.Allocate(ops->tile()));
  LACT_ASSIGN_OR_RETURN(ops->io_, TileIo::Create(ctx));
  return ops;
}

// The tokens go up tile by tile through TileIo, each tile embedded (or
// copied into x) while the next is staged and sent.
absl::Status CudaOps::LoadTokens(Tensor tokens) {
  const int64_t L = tokens.dim(0), D = c_.d_model, in = c_.input_width();
  return io_->Upload(tokens.ptr(), L, in, [&](const float* rows, int64_t first, int64_t n) {
    float* x = rows_.x.get() + first * D;
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
  // h is free once the block's mixers have run. Without a head the normed
  // rows are the output (float32); with one they are its GEMM's input.
  const bool head = model_.head() != nullptr;
  float* const output_rows = head ? nullptr : rows_.h.get() + first * D;
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(
      stream(), rows_.x.get() + first * D, D, n, D, weights_(model_.final_norm()),
      head ? rows_.NormedF32(first) : output_rows, D, head ? rows_.NormedBf16(first) : nullptr));
  return io_->Download(
      out, n, out_width,
      [&](float* scratch, int64_t piece, int64_t rows) -> absl::StatusOr<const float*> {
        if (!head) return output_rows + piece * D;
        LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first + piece), D, rows, D,
                                          weights_.Matrix(model_.head()), out_width, scratch,
                                          out_width));
        return scratch;
      });
}

absl::Status CudaOps::ReadRows(Activation a, int64_t first, int64_t n, float* out) {
  const int64_t D = c_.d_model;
  if (a == Activation::kNormed && rows_.NormedBf16(0) != nullptr) {
    // h as its GEMMs take it: bf16, widened here.
    std::vector<__nv_bfloat16> rounded(n * D);
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rounded.data(), rows_.NormedBf16(first),
                                              n * D * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost,
                                              stream()));
    LACT_RETURN_IF_ERROR(ctx_.Synchronize());
    for (int64_t i = 0; i < n * D; ++i) out[i] = __bfloat162float(rounded[i]);
    return absl::OkStatus();
  }
  const DeviceBuffer& rows = a == Activation::kResidual ? rows_.x
                             : a == Activation::kNormed ? rows_.h
                                                        : rows_.acc;
  return ctx_.Download(rows.get() + first * D, n * D, out);
}

absl::Status CudaOps::BeginBlock(const LayerWeights& w) {
  const int64_t L = tokens(), D = c_.d_model;
  mixer_.BeginBlock();
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(stream(), rows_.x.get(), D, L, D, weights_(w.norm1),
                                         rows_.NormedF32(0), D, rows_.NormedBf16(0)));
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(rows_.acc.get(), 0, rows_.acc.size() * sizeof(float), stream()));
  return absl::OkStatus();
}

}  // namespace lact
