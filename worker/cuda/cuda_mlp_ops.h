// The MLP part of the CUDA ops (cuda_ops.h): a tile's block output (x +=
// acc) and its normed rows in one launch, then the SwiGLU MLP of them added
// to x. Its scratch holds tile() tokens.
#ifndef LACT_WORKER_CUDA_CUDA_MLP_OPS_H_
#define LACT_WORKER_CUDA_CUDA_MLP_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "worker/cuda/cuda_activations.h"
#include "worker/cuda/device_weights.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CudaMlpOps : private CudaPart {
 public:
  using CudaPart::CudaPart;

  // Scratch for tiles of up to `tile` tokens.
  absl::Status Allocate(int64_t tile);
  // BackendOps::ResidualMlp.
  absl::Status Residual(const LayerWeights& w, int64_t first, int64_t n);

 private:
  TileValues gate_, up_;  // the hidden rows, in the context's precision
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_MLP_OPS_H_
