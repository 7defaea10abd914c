// Where a command's tokens come from: "FILE.npy" or "random:L[:SEED]"
// (standard-normal tokens of the model's input width, the same for a given
// seed on every machine).
#ifndef LACT_CLIENT_CLI_TOKENS_SOURCE_H_
#define LACT_CLIENT_CLI_TOKENS_SOURCE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/lact_client.h"
#include "common/tensor.h"

namespace lact::cli {

absl::StatusOr<Tensor> LoadTokens(const std::string& source, int64_t width);

// "random:L[:SEED]" as a context made row by row as it is sent, the same
// tokens LoadTokens makes (the client never holds them whole); nullopt
// for a file.
absl::StatusOr<std::optional<ContextSource>> RandomContextSource(const std::string& source,
                                                                 int64_t width);

// Standard-normal tokens, the same for a seed whatever the thread count
// and the machine: Box-Muller in float32 with this file's own polynomials
// for log, sin and cos (no libm, no fused multiply-adds), from 24-bit
// uniforms, so values lie within +-5.77 (sqrt(2 ln 2^24)). random:L is a
// prefix of random:L' (L < L') for the same seed and width.
Tensor RandomNormalTokens(int64_t tokens, int64_t width, uint64_t seed);
// Values [first, first + n) of the same stream (row r of RandomNormalTokens
// is values [r * width, (r + 1) * width)).
void RandomNormalValues(uint64_t seed, int64_t first, int64_t n, float* out);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_TOKENS_SOURCE_H_
