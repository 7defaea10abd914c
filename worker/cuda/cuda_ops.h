// The CUDA backend's BackendOps (backend_ops.h) on one GPU: the kernels of
// kernels/cuda and cuBLAS on the context's stream, in the context's GEMM
// precision, as a facade over three parts, one per sub-algorithm: the
// BiMamba mixer (cuda_mixer_ops.h), LaCT's fast weights (cuda_lact_ops.h)
// and the MLP (cuda_mlp_ops.h), which share the shard's rows
// (cuda_activations.h). Fusion and streams are this backend's business.
//
// The three [L, D] activations live on the device for the whole sequence;
// everything else is computed tile by tile in scratch of tile() tokens, so
// device memory is about 3·L·D floats plus a few tiles. The scan state, the
// fast weights and their gradients stay on the device between calls; host
// data crosses only in LoadTokens/Output, the scan and fast-weight
// Load/Store calls and ReadRows. The gradient all-reduce is `grads` on
// device memory (NCCL, or Gloo staged through the host), queued behind the
// compute stream's work.
#ifndef LACT_WORKER_CUDA_CUDA_OPS_H_
#define LACT_WORKER_CUDA_CUDA_OPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan.h"
#include "worker/collective/device_allreduce.h"
#include "worker/cuda/cuda_activations.h"
#include "worker/cuda/cuda_lact_ops.h"
#include "worker/cuda/cuda_mixer_ops.h"
#include "worker/cuda/cuda_mlp_ops.h"
#include "worker/cuda/device_weights.h"
#include "worker/cuda/tile_io.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CudaOps final : public BackendOps {
 public:
  // Allocates the activations for `tokens` rows and the tile scratch.
  // `grads` may be null for a group of one.
  static absl::StatusOr<std::unique_ptr<CudaOps>> Create(
      const Model& model, const ModelConfig& c, cuda::CudaContext& ctx,
      const DeviceWeights& weights, int64_t tokens, int64_t tile, DeviceAllReduce* grads,
      cuda::SsdMath scan_math = cuda::SsdMath::kFp32);

  absl::Status LoadTokens(Tensor tokens) override;
  absl::Status OutputRows(int64_t first, int64_t n, float* out) override;
  absl::Status ReadRows(Activation a, int64_t first, int64_t n, float* out) override;
  absl::Status BeginBlock(const LayerWeights& w) override;

  absl::Status LoadScanState(const MambaState& state) override {
    return mixer_.LoadScanState(state);
  }
  absl::Status StoreScanState(MambaState* state, float* log_decay) override {
    return mixer_.StoreScanState(state, log_decay);
  }
  absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) override {
    return mixer_.Tile(w, dir, first, n, outputs, summarize);
  }

  absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) override {
    return lact_.Load(w, retained);
  }
  absl::Status StoreFastWeights(LayerState* state) override { return lact_.Store(state); }
  absl::Status ZeroGrads() override { return lact_.ZeroGrads(); }
  absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) override {
    return lact_.Accumulate(w, first, n);
  }
  absl::Status StartGradAllReduce() override { return lact_.StartAllReduce(); }
  absl::Status FinishGradAllReduce() override { return lact_.FinishAllReduce(); }
  absl::Status UpdateFastWeights(const LayerWeights& w) override { return lact_.Update(w); }
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) override {
    return lact_.Apply(w, first, n);
  }

  absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) override {
    return mlp_.Residual(w, first, n);
  }
  absl::Status Sync() override { return ctx_.Synchronize(); }

 private:
  CudaOps(const Model& model, const ModelConfig& c, cuda::CudaContext& ctx,
          const DeviceWeights& weights, int64_t tokens, int64_t tile, DeviceAllReduce* grads)
      : BackendOps(tokens, tile),
        model_(model),
        c_(c),
        ctx_(ctx),
        weights_(weights),
        mixer_(c, ctx, weights, rows_),
        lact_(c, ctx, weights, rows_, grads),
        mlp_(c, ctx, weights, rows_) {}

  cudaStream_t stream() const { return ctx_.stream(); }

  const Model& model_;
  const ModelConfig& c_;
  cuda::CudaContext& ctx_;
  const DeviceWeights& weights_;
  CudaActivations rows_;
  std::unique_ptr<TileIo> io_;  // the tokens in, the output out
  CudaMixerOps mixer_;
  CudaLactOps lact_;
  CudaMlpOps mlp_;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_OPS_H_
