#include "worker/cuda/cuda_backend.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan.h"
#include "worker/collective/group.h"
#include "worker/collective/host_staged_allreduce.h"
#include "worker/cuda/cuda_runner.h"
#ifdef LACT_HAVE_NCCL
#include "worker/collective/nccl_collective.h"
#endif

namespace lact {
namespace {

class CudaShardRunner final : public ShardRunner {
 public:
  CudaShardRunner(const BackendOptions& options, std::unique_ptr<CudaRunner> runner)
      : options_(options), runner_(std::move(runner)) {}

  // NCCL for a group of several ranks when asked for; else Gloo, with the
  // gradient all-reduce staged through the host.
  absl::Status JoinGroup(const GroupSpec& group) override {
    if (options_.collective == "nccl" && group.size > 1) return JoinNccl(group);
    LACT_ASSIGN_OR_RETURN(gloo_, JoinGlooGroup(group, options_.collective_host));
    staged_ = std::make_unique<HostStagedAllReduce>(gloo_.grads.get());
    sync_ = gloo_.sync.get();
    grads_ = staged_.get();
    return absl::OkStatus();
  }
  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                         FusedState* state) override {
    if (sync_ == nullptr) return absl::FailedPreconditionError("RunContextShard before JoinGroup");
    return runner_->RunContextShard(std::move(shard), begin, total, sync_, grads_, state);
  }
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) override {
    return runner_->RunQuery(std::move(query), state);
  }
  OverlapStats overlap() const override { return runner_->overlap(); }

 private:
  absl::Status JoinNccl(const GroupSpec& group) {
#ifdef LACT_HAVE_NCCL
    if (group.store == nullptr)
      return absl::InternalError("a group of several ranks needs a rendezvous store");
    const NcclOptions nccl{options_.device, group.timeout};
    LACT_ASSIGN_OR_RETURN(nccl_sync_, NcclCollective::Connect(*group.store, group.prefix + "/sync",
                                                              group.rank, group.size, nccl));
    LACT_ASSIGN_OR_RETURN(nccl_grads_,
                          NcclCollective::Connect(*group.store, group.prefix + "/grads", group.rank,
                                                  group.size, nccl));
    sync_ = nccl_sync_.get();
    grads_ = nccl_grads_.get();
    return absl::OkStatus();
#else
    return absl::FailedPreconditionError("this build has no NCCL");
#endif
  }

  BackendOptions options_;
  std::unique_ptr<CudaRunner> runner_;
  GlooGroup gloo_;
  std::unique_ptr<HostStagedAllReduce> staged_;  // over gloo_.grads
#ifdef LACT_HAVE_NCCL
  std::unique_ptr<NcclCollective> nccl_sync_, nccl_grads_;
#endif
  Collective* sync_ = nullptr;
  DeviceAllReduce* grads_ = nullptr;
};

absl::Status ValidateCudaBackend(const BackendOptions& options) {
  LACT_RETURN_IF_ERROR(cuda::ParsePrecision(options.precision).status());
  if (!options.scan_math.empty()) {
    LACT_RETURN_IF_ERROR(cuda::ParseSsdMath(options.scan_math).status());
  }
  if (options.collective != "gloo" && options.collective != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective '", options.collective, "' (allowed: gloo, nccl)"));
  }
#ifndef LACT_HAVE_NCCL
  if (options.collective == "nccl")
    return absl::FailedPreconditionError("this build has no NCCL (use --collective gloo)");
#endif
  const int devices = cuda::DeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", options.device, " (", devices, " visible)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeCudaShardRunner(const BackendOptions& options,
                                                                 std::shared_ptr<const Model> model,
                                                                 const ModelConfig& config,
                                                                 RunHooks hooks) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                        CudaRunner::Create(std::move(model), config, options, std::move(hooks),
                                           DeviceWeightsCache::Process()));
  return std::unique_ptr<ShardRunner>(new CudaShardRunner(options, std::move(runner)));
}

std::optional<DeviceMemoryBytes> ReadCudaMemory(const BackendOptions& options) {
  absl::StatusOr<cuda::DeviceMemory> memory = cuda::QueryDeviceMemory(options.device);
  if (!memory.ok()) return std::nullopt;
  return DeviceMemoryBytes{memory->used_bytes, memory->total_bytes};
}

}  // namespace

Backend CudaBackend() {
  return {.name = "cuda",
          .validate = ValidateCudaBackend,
          .make_runner = MakeCudaShardRunner,
          .describe = [](const BackendOptions& options) { return options.precision; },
          .device_memory = ReadCudaMemory};
}

}  // namespace lact
