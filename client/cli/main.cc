// The `lact` command line: subcommands dispatch to their own files.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/cli/run_command.h"

namespace {

constexpr char kUsage[] =
    "usage: lact <command> [flags]\n"
    "commands:\n"
    "  run   run one job in this process (CPU):\n"
    "        lact run --model PATH|preset:NAME[:SEED] --context FILE.npy|random:L[:SEED]\n"
    "                 [--query FILE.npy]... [--muon-steps N] [--chunk-tokens N]\n"
    "                 [--threads N] [--tile-tokens N] --out FILE.safetensors\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  absl::Status status;
  if (command == "run") {
    status = lact::cli::RunCommand(args);
  } else {
    std::fprintf(stderr, "lact: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "lact %s: %s\n", command.c_str(), std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
