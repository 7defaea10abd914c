// The CUDA backend's BackendOps (backend_ops.h) on one GPU: the kernels of
// kernels/cuda and cuBLAS on the context's stream, in the context's GEMM
// precision. Fusion and streams are this backend's business.
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

  // cuda_mixer_ops.cc
  absl::Status LoadScanState(const MambaState& state) override;
  absl::Status StoreScanState(MambaState* state, float* log_decay) override;
  absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) override;

  // cuda_lact_ops.cc
  absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) override;
  absl::Status StoreFastWeights(LayerState* state) override;
  absl::Status ZeroGrads() override;
  absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) override;
  absl::Status StartGradAllReduce() override;
  absl::Status FinishGradAllReduce() override;
  absl::Status UpdateFastWeights(const LayerWeights& w) override;
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) override;

  absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) override;
  absl::Status Sync() override { return ctx_.Synchronize(); }

 private:
  CudaOps(const Model& model, const ModelConfig& c, cuda::CudaContext& ctx,
          const DeviceWeights& weights, int64_t tokens, int64_t tile, DeviceAllReduce* grads)
      : BackendOps(tokens, tile),
        model_(model),
        c_(c),
        ctx_(ctx),
        weights_(weights),
        grads_allreduce_(grads) {}

  cudaStream_t stream() const { return ctx_.stream(); }
  // h's rows from `first` as a GEMM input: in bf16 precision with their
  // rounding, made by the norm that writes h (BeginBlock, ResidualMlp) for
  // the several GEMMs that read the rows.
  cuda::GemmInput NormedRows(int64_t first) const;
  // Where that rounding of h's rows from `first` goes (null in fp32).
  __nv_bfloat16* NormedBf16(int64_t first) const;
  // A bf16 rounding buffer from its start, as bf16 (null when not made).
  static __nv_bfloat16* Bf16(const cuda::DeviceBuffer& b) {
    return reinterpret_cast<__nv_bfloat16*>(b.get());
  }
  // In bf16 precision, `x`'s `n` values rounded into `into` once, for the
  // several GEMMs that read them; null in fp32.
  absl::StatusOr<const __nv_bfloat16*> RoundOnce(const float* x, int64_t n,
                                                 const cuda::DeviceBuffer& into);

  const Model& model_;
  const ModelConfig& c_;
  cuda::CudaContext& ctx_;
  const DeviceWeights& weights_;
  DeviceAllReduce* grads_allreduce_;
  cuda::DeviceBuffer x_, h_, acc_;  // [L, D]
  // bf16 roundings of GEMM inputs, made by the kernels that write them
  // (bf16 precision only): h, the gated-norm output y, the MLP's gate, and
  // LaCT's K|V, Q, the gradient factors, the applied fast weights' gate and
  // their normed output.
  cuda::DeviceBuffer h16_, y16_, gate16_, kv16_, q16_, factors16_, g16_, o16_;
  cuda::DeviceBuffer proj_, xbc_, dt_, y_;                    // BiMamba tiles
  cuda::DeviceBuffer ssm_, conv_, conv_scratch_, log_decay_;  // the scan state
  cuda::SsdWorkspace ssd_;
  // LaCT tiles; the per-head factors g, u and hidden_grad are [H_t, tile, d_h].
  cuda::DeviceBuffer kv_, lr_, q_, o_, g_, u_, hidden_grad_;
  cuda::DeviceBuffer fast_, grads_;  // w0 | w1 | w2 and their gradients
  cuda::DeviceBuffer muon_;          // Newton-Schulz scratch
  std::unique_ptr<TileIo> io_;       // the tokens in, the output out
  cuda::DeviceBuffer gate_, up_;     // MLP tiles
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_OPS_H_
