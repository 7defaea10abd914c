// Muon's Newton-Schulz iteration (docs/model.md, LaCT) on the device, batched
// over heads with strided cuBLAS GEMMs:
//   X = G / (||G||_F + 1e-7); repeat: A = X X^T; X = a X + (b A + c A A) X
// For rows > cols the spec transposes X first; here the same iteration runs
// untransposed as A = X^T X, X = a X + X (b A + c A A), which is equal.
#ifndef LACT_KERNELS_CUDA_NEWTON_SCHULZ_H_
#define LACT_KERNELS_CUDA_NEWTON_SCHULZ_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"

namespace lact::cuda {

// g: `batch` contiguous [rows, cols] matrices, replaced by NS(g), queued on
// the context's stream. `scratch` is the caller's, grown on demand (after
// synchronizing the stream, whose queued work may still read the old one).
absl::Status NewtonSchulz(const CudaContext& ctx, float* g, int64_t batch, int64_t rows,
                          int64_t cols, int steps, DeviceBuffer* scratch);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_NEWTON_SCHULZ_H_
