// The backends this build has (the build lists them: backend_list.cc.in),
// chosen by BackendOptions::backend when a worker or `lact run` starts.
// The worker service sees only the ShardRunner interface
// (worker/schedule/backend.h).
#ifndef LACT_WORKER_BACKENDS_H_
#define LACT_WORKER_BACKENDS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model.h"
#include "worker/schedule/backend.h"

namespace lact {

// The backends built in, in the order the build lists them.
std::vector<Backend> BuiltBackends();

// INVALID_ARGUMENT for an unknown backend or option value (naming the
// allowed ones); FAILED_PRECONDITION when the backend cannot run here (not
// in this build, no such device, no NCCL).
absl::Status ValidateBackend(const BackendOptions& options);

// How the validated backend computes on `options` (Backend::describe).
std::string DescribeBackend(const BackendOptions& options);

// What reads the backend's device memory (nullopt when it cannot be read);
// null for a backend without a device (the CPU).
std::function<std::optional<DeviceMemoryBytes>()> DeviceMemoryReader(const BackendOptions& options);

// A runner on the validated backend. It keeps `model` alive; a GPU's
// weights are uploaded once per worker process.
absl::StatusOr<std::unique_ptr<ShardRunner>> MakeShardRunner(const BackendOptions& options,
                                                             std::shared_ptr<const Model> model,
                                                             const ModelConfig& config,
                                                             RunHooks hooks);

}  // namespace lact

#endif  // LACT_WORKER_BACKENDS_H_
