#include "client/cli/tokens_source.h"

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
  if (parts.size() > 3 || !absl::SimpleAtoi(parts[1], &tokens) || tokens < 1 || tokens > kMaxRandomTokens ||
      (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &seed))) {
    return absl::InvalidArgumentError(absl::StrCat("tokens '", source, "': expected random:L[:SEED] with 1 <= L <= ",
                                                   kMaxRandomTokens, " and an integer SEED"));
  }
  Tensor t({tokens, width});
  Random rng(seed);
  for (float& v : t.data) v = static_cast<float>(rng.Normal());
  return t;
}

}  // namespace lact::cli
