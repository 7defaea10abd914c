// The file a `lact` command writes its results to, checked before any
// work starts: a bad --out is found before the compute, not after it.
#ifndef LACT_CLIENT_CLI_OUTPUT_FILE_H_
#define LACT_CLIENT_CLI_OUTPUT_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace lact::cli {

// OK when `path` ends in ".safetensors" (the format lact writes) and can
// be written: an existing writable file, or a new one its folder lets this
// process create (made and removed again to find out). INVALID_ARGUMENT
// naming `flag`, the path and the reason otherwise.
absl::Status CheckOutputFile(const std::string& flag, const std::string& path);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_OUTPUT_FILE_H_
