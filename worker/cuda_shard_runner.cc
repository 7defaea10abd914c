#include "worker/cuda_shard_runner.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/device.h"
#include "worker/cuda_runner.h"
#include "worker/group.h"
#include "worker/host_staged_allreduce.h"
#ifdef LACT_HAVE_NCCL
#include "worker/nccl_collective.h"
#endif

namespace lact {
namespace {

class CudaShardRunner final : public ShardRunner {
 public:
  CudaShardRunner(const BackendOptions& options, std::unique_ptr<CudaRunner> runner)
      : options_(options), runner_(std::move(runner)) {}

  absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total, const GroupSpec& group,
                                         FusedState* state) override {
    if (options_.collective == "nccl" && group.size > 1) return RunOverNccl(shard, begin, total, group, state);
    LACT_ASSIGN_OR_RETURN(GlooGroup g, JoinGlooGroup(group, options_.collective_host));
    HostStagedAllReduce grads(g.grads.get());
    return runner_->RunContextShard(shard, begin, total, g.sync.get(), &grads, state);
  }
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) override {
    return runner_->RunQuery(query, state);
  }
  OverlapStats overlap() const override { return runner_->overlap(); }

 private:
  absl::StatusOr<Tensor> RunOverNccl(const Tensor& shard, int64_t begin, int64_t total, const GroupSpec& group,
                                     FusedState* state) {
#ifdef LACT_HAVE_NCCL
    if (group.store == nullptr) return absl::InternalError("a group of several ranks needs a rendezvous store");
    const NcclOptions nccl{options_.device, group.timeout};
    LACT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> sync,
                          NcclCollective::Connect(*group.store, group.prefix + "/sync", group.rank, group.size, nccl));
    LACT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> grads,
                          NcclCollective::Connect(*group.store, group.prefix + "/grads", group.rank, group.size, nccl));
    return runner_->RunContextShard(shard, begin, total, sync.get(), grads.get(), state);
#else
    return absl::FailedPreconditionError("this build has no NCCL");
#endif
  }

  BackendOptions options_;
  std::unique_ptr<CudaRunner> runner_;
};

}  // namespace

absl::Status ValidateCudaBackend(const BackendOptions& options) {
  LACT_RETURN_IF_ERROR(cuda::ParsePrecision(options.precision).status());
  if (options.collective != "gloo" && options.collective != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective '", options.collective, "' (allowed: gloo, nccl)"));
  }
#ifndef LACT_HAVE_NCCL
  if (options.collective == "nccl") return absl::FailedPreconditionError("this build has no NCCL (use --collective gloo)");
#endif
  const int devices = cuda::DeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", options.device, " (", devices, " visible)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeCudaShardRunner(const BackendOptions& options, const Model& model,
                                                                 const ModelConfig& config, RunHooks hooks) {
  LACT_ASSIGN_OR_RETURN(cuda::Precision precision, cuda::ParsePrecision(options.precision));
  CudaRunOptions run{options.device, precision, options.tile_tokens > 0 ? options.tile_tokens : 65536,
                     std::move(hooks.on_layer_done), std::move(hooks.cancelled)};
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner, CudaRunner::Create(model, config, std::move(run)));
  return std::unique_ptr<ShardRunner>(new CudaShardRunner(options, std::move(runner)));
}

}  // namespace lact
