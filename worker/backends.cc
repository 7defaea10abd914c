#include "worker/backends.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace lact {
namespace {

// Every backend lact has, built here or not, and what a build without it
// says.
struct KnownBackend {
  const char* name;
  const char* absent;
};
constexpr KnownBackend kKnownBackends[] = {
    {"cpu", "this build has no CPU backend"},
    {"cuda", "this build has no CUDA backend (no CUDA toolkit was found at build time)"},
};

absl::StatusOr<Backend> FindBackend(const std::string& name) {
  for (Backend& b : BuiltBackends())
    if (b.name == name) return std::move(b);
  std::vector<std::string> names;
  for (const KnownBackend& known : kKnownBackends) {
    if (name == known.name) return absl::FailedPreconditionError(known.absent);
    names.push_back(known.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (allowed: ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace

absl::Status ValidateBackend(const BackendOptions& options) {
  LACT_ASSIGN_OR_RETURN(const Backend backend, FindBackend(options.backend));
  return backend.validate(options);
}

std::string DescribeBackend(const BackendOptions& options) {
  absl::StatusOr<Backend> backend = FindBackend(options.backend);
  return backend.ok() ? backend->describe(options) : options.precision;
}

std::function<std::optional<DeviceMemoryBytes>()> DeviceMemoryReader(
    const BackendOptions& options) {
  absl::StatusOr<Backend> backend = FindBackend(options.backend);
  if (!backend.ok() || !backend->device_memory) return nullptr;
  return [read = backend->device_memory, options] { return read(options); };
}

absl::StatusOr<std::unique_ptr<ShardRunner>> MakeShardRunner(const BackendOptions& options,
                                                             std::shared_ptr<const Model> model,
                                                             const ModelConfig& config,
                                                             RunHooks hooks) {
  LACT_ASSIGN_OR_RETURN(const Backend backend, FindBackend(options.backend));
  LACT_RETURN_IF_ERROR(backend.validate(options));
  return backend.make_runner(options, std::move(model), config, std::move(hooks));
}

}  // namespace lact
