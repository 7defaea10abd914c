// What a worker runs a job's shard with: the CPU (CpuRunner, Gloo) or one
// GPU (CudaRunner; Gloo staged through the host, or NCCL), chosen when the
// worker starts. The worker service sees only this interface.
#ifndef LACT_WORKER_SHARD_RUNNER_H_
#define LACT_WORKER_SHARD_RUNNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/schedule/shard.h"

namespace lact {

// INVALID_ARGUMENT for an unknown value (naming the allowed ones);
// FAILED_PRECONDITION when the backend cannot run here (no CUDA in this
// build, no such device, no NCCL).
absl::Status ValidateBackend(const BackendOptions& options);

// The memory of a CUDA backend's device, in use (by every process on it)
// and in all; nullopt for the CPU backend, or when it cannot be read.
struct DeviceMemoryBytes {
  int64_t used = 0;
  int64_t total = 0;
};
std::optional<DeviceMemoryBytes> ReadDeviceMemory(const BackendOptions& options);

class ShardRunner {
 public:
  virtual ~ShardRunner() = default;
  // Meets the group's other ranks (blocks until all have come, or the
  // group's timeout); needed before RunContextShard.
  virtual absl::Status JoinGroup(const GroupSpec& group) = 0;
  // This rank's shard [begin, begin + L) of a context of `total` tokens:
  // its output rows, or an empty tensor when the hooks' on_output_rows
  // took them tile by tile as the last block finished them.
  virtual absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total,
                                                 FusedState* state) = 0;
  virtual absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) = 0;
  virtual OverlapStats overlap() const = 0;
};

// The runner keeps `model` alive; on a GPU its weights are uploaded once
// per worker process (DeviceWeightsCache).
absl::StatusOr<std::unique_ptr<ShardRunner>> MakeShardRunner(const BackendOptions& options,
                                                             std::shared_ptr<const Model> model,
                                                             const ModelConfig& config,
                                                             RunHooks hooks);

}  // namespace lact

#endif  // LACT_WORKER_SHARD_RUNNER_H_
