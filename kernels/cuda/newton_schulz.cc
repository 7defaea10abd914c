#include "kernels/cuda/newton_schulz.h"

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace lact::cuda {

absl::Status NewtonSchulz(const CudaContext& ctx, float* g, int64_t batch, int64_t rows,
                          int64_t cols, int steps, DeviceBuffer* scratch) {
  constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
  const int64_t size = rows * cols, r = std::min(rows, cols), rr = r * r;
  const bool wide = rows <= cols;  // A = X X^T (wide) or X^T X (tall)
  LACT_RETURN_IF_ERROR(NormalizeMatrices(ctx.stream(), g, batch, size));
  const size_t need = static_cast<size_t>(batch * (2 * rr + size));
  if (scratch->size() < need) {
    LACT_RETURN_IF_ERROR(ctx.Synchronize());
    *scratch = DeviceBuffer();
    LACT_ASSIGN_OR_RETURN(*scratch, DeviceBuffer::Allocate(need));
  }
  // A, then A A and b A + c A A, then the next X.
  float* a = scratch->get();
  float* aa = a + batch * rr;
  float* next = aa + batch * rr;
  for (int s = 0; s < steps; ++s) {
    if (wide) {  // A[r, r] = X X^T
      LACT_RETURN_IF_ERROR(GemmStridedBatched(ctx, false, true, r, r, cols, 1.0f, g, cols, size, g,
                                              cols, size, 0.0f, a, r, rr, batch, /*fp32=*/true));
    } else {  // A[r, r] = X^T X
      LACT_RETURN_IF_ERROR(GemmStridedBatched(ctx, true, false, r, r, rows, 1.0f, g, cols, size, g,
                                              cols, size, 0.0f, a, r, rr, batch, /*fp32=*/true));
    }
    LACT_RETURN_IF_ERROR(GemmStridedBatched(ctx, false, false, r, r, r, 1.0f, a, r, rr, a, r, rr,
                                            0.0f, aa, r, rr, batch, /*fp32=*/true));  // A A
    LACT_RETURN_IF_ERROR(Axpby(ctx.stream(), kB, a, kC, aa, aa, batch * rr));  // B = b A + c A A
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(next, g, batch * size * sizeof(float),
                                              cudaMemcpyDeviceToDevice, ctx.stream()));
    if (wide) {  // next = a X + B X
      LACT_RETURN_IF_ERROR(GemmStridedBatched(ctx, false, false, rows, cols, rows, 1.0f, aa, r, rr,
                                              g, cols, size, kA, next, cols, size, batch,
                                              /*fp32=*/true));
    } else {  // next = a X + X B
      LACT_RETURN_IF_ERROR(GemmStridedBatched(ctx, false, false, rows, cols, cols, 1.0f, g, cols,
                                              size, aa, r, rr, kA, next, cols, size, batch,
                                              /*fp32=*/true));
    }
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(g, next, batch * size * sizeof(float),
                                              cudaMemcpyDeviceToDevice, ctx.stream()));
  }
  return absl::OkStatus();
}

}  // namespace lact::cuda
