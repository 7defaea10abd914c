// How the command-line programs (lact, lact-run) end.
#ifndef LACT_CLIENT_CLI_EXIT_STATUS_H_
#define LACT_CLIENT_CLI_EXIT_STATUS_H_

#include "absl/status/status.h"

namespace lact::cli {

// The exit status of a command that ended with `status`: 0; 2 when what the
// caller gave was wrong (a flag, a file, a model or job name, a token); 1
// when the cluster or the machine failed.
int ExitStatus(const absl::Status& status);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_EXIT_STATUS_H_
