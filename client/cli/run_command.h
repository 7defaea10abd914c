// `lact run`: one job in this process, on the CPU (default) or one GPU.
//   lact run --model PATH|preset:NAME[:SEED] --context FILE.npy|random:L[:SEED]
//            [--query FILE.npy]... [--muon-steps N] [--chunk-tokens N]
//            [--threads N] [--tile-tokens N] [--backend cpu|cuda] [--device N]
//            --out FILE.safetensors
// Writes `output`, `query_K` and the fused state (docs/model.md, The fused state) as float32;
// prints progress, tokens/s and peak memory to stderr. It is the lact-run
// binary (run_main.cc), which alone links the compute stack; `lact run`
// starts it (ExecRun).
#ifndef LACT_CLIENT_CLI_RUN_COMMAND_H_
#define LACT_CLIENT_CLI_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lact::cli {

absl::Status RunCommand(const std::vector<std::string>& args);

// Replaces this process with the lact-run binary beside it, given `args`;
// returns only if it could not start it (FAILED_PRECONDITION naming it).
absl::Status ExecRun(const std::vector<std::string>& args);

// What `lact run --help` prints.
inline constexpr char kRunUsage[] =
    "  run   run one job in this process (CPU, or one GPU with --backend cuda):\n"
    "        lact run --model PATH|preset:NAME[:SEED] --context FILE.npy|random:L[:SEED]\n"
    "                 [--query FILE.npy]... [--muon-steps N] [--chunk-tokens N]\n"
    "                 [--threads N] [--tile-tokens N] [--backend cpu|cuda] [--device N]\n"
    "                 [--precision fp32|bf16] [--scan-math fp32|tf32x3|bf16 (default bf16 in\n"
    "                 bf16 precision where the model allows, else fp32)]\n"
    "                 --out FILE.safetensors\n";

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_RUN_COMMAND_H_
