// `lact run`: one job in this process, on the CPU (default) or one GPU.
//   lact run --model PATH|preset:NAME[:SEED] --context FILE.npy|random:L[:SEED]
//            [--query FILE.npy]... [--muon-steps N] [--chunk-tokens N]
//            [--threads N] [--tile-tokens N] [--backend cpu|cuda] [--device N]
//            --out FILE.safetensors
// Writes `output`, `query_K` and the fused state (docs/model.md, The fused state) as float32;
// prints progress, tokens/s and peak memory to stderr.
#ifndef LACT_CLIENT_CLI_RUN_COMMAND_H_
#define LACT_CLIENT_CLI_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lact::cli {

absl::Status RunCommand(const std::vector<std::string>& args);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_RUN_COMMAND_H_
