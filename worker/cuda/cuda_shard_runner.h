// The CUDA side of shard_runner.h (built only with a CUDA toolkit): a
// CudaRunner whose group is Gloo staged through the host (several workers
// may share a GPU) or NCCL (one GPU per rank).
#ifndef LACT_WORKER_CUDA_CUDA_SHARD_RUNNER_H_
#define LACT_WORKER_CUDA_CUDA_SHARD_RUNNER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/shard_runner.h"

namespace lact {

absl::Status ValidateCudaBackend(const BackendOptions& options);

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeCudaShardRunner(const BackendOptions& options,
                                                                 std::shared_ptr<const Model> model,
                                                                 const ModelConfig& config,
                                                                 RunHooks hooks);

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_SHARD_RUNNER_H_
