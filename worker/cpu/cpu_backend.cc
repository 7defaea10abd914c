#include "worker/cpu/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/collective/group.h"
#include "worker/cpu/cpu_runner.h"

namespace lact {
namespace {

class CpuShardRunner final : public ShardRunner {
 public:
  // `bf16_weights`: the model's bf16-rounded weights in the bf16 mode.
  CpuShardRunner(std::shared_ptr<const Model> model, const ModelConfig& config,
                 const BackendOptions& options, RunHooks hooks,
                 std::shared_ptr<const Model> bf16_weights)
      : model_(std::move(model)),
        host_(options.collective_host),
        runner_(*model_, config, options, std::move(hooks), std::move(bf16_weights)) {}

  absl::Status JoinGroup(const GroupSpec& group) override {
    LACT_ASSIGN_OR_RETURN(group_, JoinGlooGroup(group, host_));
    return absl::OkStatus();
  }
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         FusedState* state) override {
    if (group_.sync == nullptr)
      return absl::FailedPreconditionError("RunContextShard before JoinGroup");
    return runner_.RunContextShard(std::move(shard), begin, total, group_.sync.get(),
                                   group_.grads.get(), state);
  }
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) override {
    return runner_.RunQuery(std::move(query), state);
  }
  OverlapStats overlap() const override { return runner_.overlap(); }

 private:
  std::shared_ptr<const Model> model_;
  std::string host_;
  CpuRunner runner_;
  GlooGroup group_;
};

absl::Status ValidateCpuBackend(const BackendOptions& options) {
  if (options.precision != "fp32" && options.precision != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown precision '", options.precision, "' (allowed: fp32, bf16)"));
  }
  if (!options.scan_math.empty() && options.scan_math != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--scan-math '", options.scan_math,
                     "': the CPU backend's SSD scan is fp32 (allowed: fp32; ",
                     "tf32x3 and bf16 are for --backend cuda)"));
  }
  if (options.collective != "gloo") {
    return absl::InvalidArgumentError(absl::StrCat("--collective '", options.collective,
                                                   "': CPU workers use gloo (allowed: gloo)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeCpuShardRunner(const BackendOptions& options,
                                                                std::shared_ptr<const Model> model,
                                                                const ModelConfig& config,
                                                                RunHooks hooks) {
  std::shared_ptr<const Model> bf16_weights;  // made once per model (SharedBf16Weights)
  if (options.precision == "bf16") {
    LACT_ASSIGN_OR_RETURN(bf16_weights, SharedBf16Weights(model));
  }
  return std::unique_ptr<ShardRunner>(new CpuShardRunner(
      std::move(model), config, options, std::move(hooks), std::move(bf16_weights)));
}

}  // namespace

std::string DescribeCpuBackend(const BackendOptions& options) {
  return options.precision == "bf16" ? absl::StrCat("bf16, ", CpuBf16Mode()) : options.precision;
}

Backend CpuBackend() {
  return {.name = "cpu",
          .validate = ValidateCpuBackend,
          .make_runner = MakeCpuShardRunner,
          .describe = DescribeCpuBackend};
}

}  // namespace lact
