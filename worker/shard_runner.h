// What a worker runs a job's shard with: the CPU (CpuRunner, Gloo) or one
// GPU (CudaRunner; Gloo staged through the host, or NCCL), chosen when the
// worker starts. The worker service sees only this interface.
#ifndef LACT_WORKER_SHARD_RUNNER_H_
#define LACT_WORKER_SHARD_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/cpu_block.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace lact {

struct BackendOptions {
  std::string backend = "cpu";  // cpu | cuda
  int threads = 0;              // CPU compute threads, 0 = all cores
  int64_t tile_tokens = 0;      // 0: the backend's default (CPU 4096, CUDA 65536)
  int device = 0;               // CUDA device
  std::string precision = "fp32";    // CUDA GEMM precision: fp32 | bf16
  std::string collective = "gloo";   // CUDA workers' transport: gloo | nccl
  std::string collective_host = "127.0.0.1";  // address Gloo listens on
};

// INVALID_ARGUMENT for an unknown value (naming the allowed ones);
// FAILED_PRECONDITION when the backend cannot run here (no CUDA in this
// build, no such device, no NCCL).
absl::Status ValidateBackend(const BackendOptions& options);

// The group a shard runs in; the ranks meet through `store` under `prefix`.
struct GroupSpec {
  gloo::rendezvous::Store* store = nullptr;  // unused for a group of one
  std::string prefix;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{60000};
};

struct RunHooks {
  std::function<void(int, int)> on_layer_done;  // (layers done, layers in all)
  std::function<bool()> cancelled;              // polled between tiles
};

class ShardRunner {
 public:
  virtual ~ShardRunner() = default;
  // Meets the group's other ranks (blocks until all have come, or the
  // group's timeout); needed before RunContextShard.
  virtual absl::Status JoinGroup(const GroupSpec& group) = 0;
  // This rank's shard [begin, begin + L) of a context of `total` tokens.
  virtual absl::StatusOr<Tensor> RunContextShard(Tensor shard, int64_t begin, int64_t total, FusedState* state) = 0;
  virtual absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state) = 0;
  virtual OverlapStats overlap() const = 0;
};

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeShardRunner(const BackendOptions& options, const Model& model,
                                                             const ModelConfig& config, RunHooks hooks);

}  // namespace lact

#endif  // LACT_WORKER_SHARD_RUNNER_H_
