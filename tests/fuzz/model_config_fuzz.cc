// libFuzzer target: any text as a model config (a safetensors file's
// "config" metadata) and as a job's options, both JSON; a config that
// parses must also pass its own validation.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lact::ModelConfig> config = lact::ParseModelConfig(text);
  if (config.ok() && !lact::ValidateModelConfig(*config).ok()) std::abort();
  absl::StatusOr<lact::JobOptions> options = lact::ParseJobOptions(text);
  if (config.ok() && options.ok()) (void)lact::ApplyJobOptions(*config, *options);
  return 0;
}
