// lact-run: `lact run` (run_command.h), one job in this process; the only
// command-line program that links the compute stack. `lact run` starts it.
#include <cstdio>
#include <string>
#include <vector>

#include "client/cli/exit_status.h"
#include "client/cli/run_command.h"
#include "common/malloc_policy.h"

int main(int argc, char** argv) {
  lact::KeepFreedMemory();
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::printf("usage:\n%s", lact::cli::kRunUsage);
      return 0;
    }
  }
  const absl::Status status = lact::cli::RunCommand(args);
  if (!status.ok()) std::fprintf(stderr, "lact run: %s\n", std::string(status.message()).c_str());
  return lact::cli::ExitStatus(status);
}
