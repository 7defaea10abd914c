// The `lact` subcommands that talk to a cluster (submit, query, status,
// watch, fetch, cancel, delete, models, workers) or run one (local). Each
// parses its own flags; errors return a status whose message names the
// problem.
#ifndef LACT_CLIENT_CLI_SERVICE_COMMANDS_H_
#define LACT_CLIENT_CLI_SERVICE_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lact::cli {

absl::Status SubmitCommand(const std::vector<std::string>& args);
absl::Status QueryCommand(const std::vector<std::string>& args);
absl::Status StatusCommand(const std::vector<std::string>& args);
absl::Status WatchCommand(const std::vector<std::string>& args);
absl::Status FetchCommand(const std::vector<std::string>& args);
absl::Status CancelCommand(const std::vector<std::string>& args);
absl::Status DeleteCommand(const std::vector<std::string>& args);
absl::Status ModelsCommand(const std::vector<std::string>& args);
absl::Status WorkersCommand(const std::vector<std::string>& args);
absl::Status LocalCommand(const std::vector<std::string>& args);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_SERVICE_COMMANDS_H_
