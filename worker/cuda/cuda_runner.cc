#include "worker/cuda/cuda_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/ssd_scan_bf16.h"
#include "worker/cuda/cuda_ops.h"

namespace lact {
namespace {

bool Bf16ScanTakes(const ModelConfig& config) {
  return config.ssm.head_dim <= cuda::kSsdBf16MaxHeadDim &&
         config.ssm.d_state <= cuda::kSsdBf16MaxState;
}

}  // namespace

absl::StatusOr<cuda::SsdMath> ScanMathFor(const std::string& asked, cuda::Precision precision,
                                          const ModelConfig& config) {
  if (asked.empty()) {
    return precision == cuda::Precision::kBf16 && Bf16ScanTakes(config) ? cuda::SsdMath::kBf16
                                                                        : cuda::SsdMath::kFp32;
  }
  LACT_ASSIGN_OR_RETURN(const cuda::SsdMath scan_math, cuda::ParseSsdMath(asked));
  if (scan_math != cuda::SsdMath::kBf16) return scan_math;
  if (precision != cuda::Precision::kBf16) {
    return absl::InvalidArgumentError(
        "--scan-math bf16 needs --precision bf16 (the scan reads and writes bf16)");
  }
  if (!Bf16ScanTakes(config)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--scan-math bf16 takes ssm.head_dim <= ", cuda::kSsdBf16MaxHeadDim,
        " and ssm.d_state <= ", cuda::kSsdBf16MaxState, "; the model has ", config.ssm.head_dim,
        " and ", config.ssm.d_state, " (--scan-math fp32 or tf32x3 take any)"));
  }
  return scan_math;
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(const Model& model,
                                                               const ModelConfig& config,
                                                               const BackendOptions& options,
                                                               RunHooks hooks) {
  return Create(model, config, options, std::move(hooks),
                [&model](cuda::CudaContext& ctx) { return DeviceWeights::Upload(model, ctx); });
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(std::shared_ptr<const Model> model,
                                                               const ModelConfig& config,
                                                               const BackendOptions& options,
                                                               RunHooks hooks,
                                                               DeviceWeightsCache& cache) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                        Create(*model, config, options, std::move(hooks),
                               [&](cuda::CudaContext& ctx) { return cache.Get(model, ctx); }));
  runner->owned_model_ = std::move(model);
  return runner;
}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(
    const Model& model, const ModelConfig& config, const BackendOptions& options, RunHooks hooks,
    const std::function<absl::StatusOr<std::shared_ptr<const DeviceWeights>>(cuda::CudaContext&)>&
        weights) {
  if (options.tile_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tile of ", options.tile_tokens, " tokens (need >= 1, or 0 for 65536)"));
  }
  if (config.ttt.ns_bf16) {
    return absl::InvalidArgumentError(
        "the model's ttt.ns_precision is \"bf16\", which the cuda backend does not run "
        "(allowed here: \"float32\"; the cpu backend runs both)");
  }
  LACT_ASSIGN_OR_RETURN(cuda::Precision precision, cuda::ParsePrecision(options.precision));
  LACT_ASSIGN_OR_RETURN(const cuda::SsdMath scan_math,
                        ScanMathFor(options.scan_math, precision, config));
  const int64_t tile = options.tile_tokens > 0 ? options.tile_tokens : 65536;
  auto runner = std::unique_ptr<CudaRunner>(new CudaRunner(model, config, tile, std::move(hooks)));
  runner->scan_math_ = scan_math;
  // A stream and cuBLAS handle this process made before, if one is idle.
  LACT_ASSIGN_OR_RETURN(runner->ctx_, CudaContextPool::Process().Take(options.device, precision));
  LACT_ASSIGN_OR_RETURN(runner->weights_, weights(*runner->ctx_));
  return runner;
}

absl::StatusOr<SequenceOps> CudaRunner::Ops(int64_t rows, DeviceAllReduce* grads) {
  LACT_RETURN_IF_ERROR(ctx_->Activate());  // the device is per thread in CUDA
  LACT_ASSIGN_OR_RETURN(
      std::unique_ptr<CudaOps> ops,
      CudaOps::Create(model_, runner_.config(), *ctx_, *weights_, rows, tile_, grads, scan_math_));
  SequenceOps sequence{&model_, std::move(ops)};
  if (grads != nullptr) {
    sequence.after = [this, grads, busy = grads->busy_seconds(), waited = grads->waited_seconds()] {
      overlap_.allreduce_seconds += grads->busy_seconds() - busy;
      overlap_.waited_seconds += grads->waited_seconds() - waited;
    };
  }
  return sequence;
}

}  // namespace lact
