// Runs the model of SPEC.md on one NVIDIA GPU: the CUDA counterpart of
// CpuRunner. Weights are uploaded once at Create(); a sequence keeps three
// [L, D] activations on the device and computes everything else in tiles
// (cuda_block.h). Precision: fp32 (TF32 off; parity with the float64
// reference) or bf16 GEMM operands with fp32 accumulation and state (the
// production mode; kernels/cuda/device.h).
//
// RunContext()/RunQuery() work as in CpuRunner on a group of one;
// RunContextShard() runs this rank's shard with its peers: `sync` carries
// the small host-staged exchanges, `grads` the gradient all-reduce on device
// memory (NCCL, or Gloo staged through the host). Inputs are validated like
// CpuRunner's (INVALID_ARGUMENT naming the problem). Not thread-safe.
#ifndef LACT_WORKER_CUDA_RUNNER_H_
#define LACT_WORKER_CUDA_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "kernels/cuda/device.h"
#include "worker/collective.h"
#include "worker/cpu_block.h"
#include "worker/cuda_block.h"
#include "worker/device_allreduce.h"

namespace lact {

struct CudaRunOptions {
  int device = 0;
  cuda::Precision precision = cuda::Precision::kFp32;
  int64_t tile_tokens = 65536;  // tokens per tile
  // Called after each layer with (layers done, layers in all).
  std::function<void(int, int)> on_layer_done;
  // Polled between tiles; true stops the run with CANCELLED.
  std::function<bool()> cancelled;
};

class CudaRunner {
 public:
  // FAILED_PRECONDITION when there is no such device. `config` is the
  // model's config with the job's overrides applied.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(const Model& model, const ModelConfig& config,
                                                            CudaRunOptions options = {});

  absl::StatusOr<Tensor> RunContext(const Tensor& context, FusedState* state);
  absl::StatusOr<Tensor> RunContextShard(const Tensor& shard, int64_t begin, int64_t total, Collective* sync,
                                         DeviceAllReduce* grads, FusedState* state);
  absl::StatusOr<Tensor> RunQuery(const Tensor& query, const FusedState& state);

  // Gradient all-reduce time and the part of it not hidden, summed over runs.
  const OverlapStats& overlap() const { return overlap_; }

 private:
  CudaRunner(const Model& model, const ModelConfig& config, CudaRunOptions options)
      : model_(model), config_(config), options_(std::move(options)) {}
  absl::StatusOr<Tensor> Run(const Tensor& tokens, bool is_context, const CudaShard& shard, FusedState* state);
  absl::Status Embed(const Tensor& tokens, CudaBlock& block);
  absl::StatusOr<Tensor> Head(CudaBlock& block);

  const Model& model_;
  ModelConfig config_;
  CudaRunOptions options_;
  std::unique_ptr<cuda::CudaContext> ctx_;
  DeviceWeights weights_;
  LocalCollective local_;
  OverlapStats overlap_;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_RUNNER_H_
