// The LaCT part of the CUDA ops (cuda_ops.h; docs/model.md, LaCT): the
// layer's fast weights and their gradients on the device, a tile's
// gradient sums (batched over heads with strided GEMMs), the gradient
// all-reduce (NCCL, or Gloo staged through the host) queued behind the
// compute stream's work, the update (Newton-Schulz, weight norm), and a
// tile's application of the fast weights into acc. Its scratch holds
// tile() tokens; the per-head factors g, u and hidden_grad are
// [H_t, tile, d_h].
#ifndef LACT_WORKER_CUDA_CUDA_LACT_OPS_H_
#define LACT_WORKER_CUDA_CUDA_LACT_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "worker/collective/device_allreduce.h"
#include "worker/cuda/cuda_activations.h"
#include "worker/cuda/device_weights.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CudaLactOps : private CudaPart {
 public:
  // `grads` may be null for a group of one; all outlive the ops.
  CudaLactOps(const ModelConfig& c, cuda::CudaContext& ctx, const DeviceWeights& weights,
              CudaActivations& rows, DeviceAllReduce* grads)
      : CudaPart(c, ctx, weights, rows), grads_allreduce_(grads) {}

  // The fast weights, their gradients and scratch for tiles of up to
  // `tile` tokens.
  absl::Status Allocate(int64_t tile);
  // BackendOps' LoadFastWeights, StoreFastWeights, ZeroGrads,
  // AccumulateGrads, StartGradAllReduce, FinishGradAllReduce,
  // UpdateFastWeights and ApplyFastWeights.
  absl::Status Load(const LayerWeights& w, const LayerState* retained);
  absl::Status Store(LayerState* state);
  absl::Status ZeroGrads();
  absl::Status Accumulate(const LayerWeights& w, int64_t first, int64_t n);
  absl::Status StartAllReduce();
  absl::Status FinishAllReduce();
  absl::Status Update(const LayerWeights& w);
  absl::Status Apply(const LayerWeights& w, int64_t first, int64_t n);

 private:
  // Fast weight m (w0, w1, w2) as a GEMM input, with its bf16 rounding in
  // bf16 precision.
  cuda::GemmInput FastWeight(int m) const;

  DeviceAllReduce* grads_allreduce_;
  // Tiles in the context's precision: K|V, Q, the fast weights' products
  // (G, U, Hd; in the update they become the gradient factors in place)
  // and their applied output.
  TileValues kv_, q_, o_, g_, u_, hidden_grad_;
  cuda::DeviceBuffer lr_;            // the tile's learning rates, float32
  cuda::DeviceBuffer fast_, grads_;  // w0 | w1 | w2 and their gradients
  // The fast weights rounded to bf16 (bf16 precision only), remade by each
  // load and update, for the GEMMs that read them.
  cuda::DeviceBuffer fast16_;
  cuda::DeviceBuffer muon_;  // Newton-Schulz scratch
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_LACT_OPS_H_
