// What a backend gives the worker: a ShardRunner for a job's shard, and
// the checks and readings the worker makes of it before any job. Each
// backend (worker/cpu, worker/cuda) describes itself with one Backend; the
// build lists those it has (worker/backends.h). Nothing here knows any
// backend by name.
#ifndef LACT_WORKER_SCHEDULE_BACKEND_H_
#define LACT_WORKER_SCHEDULE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/collective/group_spec.h"
#include "worker/schedule/shard.h"

namespace lact {

// One job's shard (a context and the query sets against it) on a backend.
// Used from one thread at a time.
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

// The memory of a backend's device, in use (by every process on it) and in
// all.
struct DeviceMemoryBytes {
  int64_t used = 0;
  int64_t total = 0;
};

struct Backend {
  std::string name;  // BackendOptions::backend
  // OK, INVALID_ARGUMENT for an option value the backend does not take
  // (naming those it does), or FAILED_PRECONDITION when it cannot run here
  // (no such device, no NCCL).
  std::function<absl::Status(const BackendOptions&)> validate;
  // A runner for one shard, on options `validate` accepted. The runner
  // keeps `model` alive; `config` is the model's with the job's overrides.
  std::function<absl::StatusOr<std::unique_ptr<ShardRunner>>(
      const BackendOptions&, std::shared_ptr<const Model> model, const ModelConfig& config,
      RunHooks hooks)>
      make_runner;
  // How it computes on `options`, for start-up logs: the precision and the
  // path its GEMMs take on this machine.
  std::function<std::string(const BackendOptions&)> describe;
  // The device's memory; null for a backend without one, nullopt when it
  // cannot be read.
  std::function<std::optional<DeviceMemoryBytes>(const BackendOptions&)> device_memory;
};

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_BACKEND_H_
