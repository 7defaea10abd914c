// Runs the model of docs/model.md on one NVIDIA GPU: the one runner
// (model_runner.h) over CudaOps. Weights are uploaded at Create(), or
// taken from a DeviceWeightsCache that uploaded them once for the process;
// the stream and cuBLAS handle come from the process's CudaContextPool.
// Precision: fp32 (TF32 off; parity with the float64 reference) or bf16 GEMM
// operands with fp32 accumulation and state (the production mode;
// kernels/cuda/device.h).
//
// RunContext()/RunQuery() work as in CpuRunner on a group of one;
// RunContextShard() runs this rank's shard with its peers: `sync` carries
// the small host-staged exchanges, `grads` the gradient all-reduce on device
// memory (NCCL, or Gloo staged through the host). Inputs are validated like
// CpuRunner's (run_tokens.h); the tokens given are consumed. Not thread-safe.
#ifndef LACT_WORKER_CUDA_CUDA_RUNNER_H_
#define LACT_WORKER_CUDA_CUDA_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan.h"
#include "worker/collective/collective.h"
#include "worker/collective/device_allreduce.h"
#include "worker/cuda/context_pool.h"
#include "worker/cuda/device_weights.h"
#include "worker/schedule/model_runner.h"
#include "worker/schedule/shard.h"

namespace lact {

// The SSD scan's math for `asked` (BackendOptions::scan_math): the one
// asked for, INVALID_ARGUMENT where it cannot run (an unknown name; bf16
// without bf16 precision or beyond the bf16 scan's shapes); or, when
// `asked` is empty, the precision's: the bf16 tensor-core scan in bf16
// precision where the model's shapes allow it, else fp32.
absl::StatusOr<cuda::SsdMath> ScanMathFor(const std::string& asked, cuda::Precision precision,
                                          const ModelConfig& config);

class CudaRunner {
 public:
  // Of `options`, device, precision, scan_math (ScanMathFor) and
  // tile_tokens are used. FAILED_PRECONDITION when there is no such
  // device; INVALID_ARGUMENT for an unknown precision or a scan math that
  // cannot run.
  // `config` is the model's config with the job's overrides applied.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(const Model& model,
                                                            const ModelConfig& config,
                                                            const BackendOptions& options = {},
                                                            RunHooks hooks = {});
  // The same with the weights from `cache`; the runner keeps `model` alive.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(std::shared_ptr<const Model> model,
                                                            const ModelConfig& config,
                                                            const BackendOptions& options,
                                                            RunHooks hooks,
                                                            DeviceWeightsCache& cache);

  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state) {
    return runner_.RunContext(std::move(context), state);
  }
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         Collective* sync, DeviceAllReduce* grads,
                                         FusedState* state) {
    return runner_.RunContextShard(std::move(shard), begin, total, sync, grads, state);
  }
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) {
    return runner_.RunQuery(std::move(query), state);
  }

  // Gradient all-reduce time and the part of it not hidden, summed over runs.
  const OverlapStats& overlap() const { return overlap_; }

 private:
  CudaRunner(const Model& model, const ModelConfig& config, int64_t tile, RunHooks hooks)
      : model_(model),
        tile_(tile),
        runner_(config, std::move(hooks),
                [this](int64_t rows, DeviceAllReduce* grads) { return Ops(rows, grads); }) {}
  // The runner with its context; `weights` supplies the weights there.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(
      const Model& model, const ModelConfig& config, const BackendOptions& options, RunHooks hooks,
      const std::function<absl::StatusOr<std::shared_ptr<const DeviceWeights>>(cuda::CudaContext&)>&
          weights);
  // CudaOps for a sequence of `rows` tokens on this runner's device; the
  // all-reduce time the sequence adds is counted once it has run.
  absl::StatusOr<SequenceOps> Ops(int64_t rows, DeviceAllReduce* grads);

  const Model& model_;
  std::shared_ptr<const Model> owned_model_;  // when made from a cache
  int64_t tile_;
  cuda::SsdMath scan_math_ = cuda::SsdMath::kFp32;
  CudaContextPool::Lease ctx_;
  std::shared_ptr<const DeviceWeights> weights_;
  OverlapStats overlap_;
  ModelRunner<DeviceAllReduce> runner_;  // last: its ops use the rest
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_RUNNER_H_
