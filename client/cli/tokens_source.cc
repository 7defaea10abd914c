#include "client/cli/tokens_source.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/npy.h"
#include "common/random.h"

namespace lact::cli {

// Upper bound on random:L so a typo cannot ask for terabytes.
constexpr int64_t kMaxRandomTokens = int64_t{1} << 26;

absl::StatusOr<Tensor> LoadTokens(const std::string& source, int64_t width) {
  if (!absl::StartsWith(source, "random:")) return ReadNpy(source);
  std::vector<std::string> parts = absl::StrSplit(source, ':');
  int64_t tokens = 0;
  uint64_t seed = 0;
  if (parts.size() > 3 || !absl::SimpleAtoi(parts[1], &tokens) || tokens < 1 ||
      tokens > kMaxRandomTokens || (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &seed))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens '", source, "': expected random:L[:SEED] with 1 <= L <= ", kMaxRandomTokens,
        " and an integer SEED"));
  }
  return RandomNormalTokens(tokens, width, seed);
}

Tensor RandomNormalTokens(int64_t tokens, int64_t width, uint64_t seed) {
  // Blocks of values with their own streams, so the result does not depend
  // on the thread count; each Box-Muller draw gives two values.
  constexpr int64_t kBlock = 1 << 16;
  Tensor t({tokens, width});
  const int64_t total = t.size(), blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    Random rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(b));
    const int64_t end = std::min(total, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; i += 2) {
      const double radius = std::sqrt(-2.0 * std::log(1.0 - rng.Uniform())),
                   angle = 2.0 * M_PI * rng.Uniform();
      t.data[i] = static_cast<float>(radius * std::cos(angle));
      if (i + 1 < end) t.data[i + 1] = static_cast<float>(radius * std::sin(angle));
    }
  }
  return t;
}

}  // namespace lact::cli
