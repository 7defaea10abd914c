#include "client/cli/tokens_source.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/huge_pages.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace lact::cli {

// Upper bound on random:L so a typo cannot ask for terabytes.
constexpr int64_t kMaxRandomTokens = int64_t{1} << 26;

namespace {

struct RandomSpec {
  int64_t tokens = 0;
  uint64_t seed = 0;
};

absl::StatusOr<RandomSpec> ParseRandom(const std::string& source) {
  std::vector<std::string> parts = absl::StrSplit(source, ':');
  RandomSpec r;
  if (parts.size() > 3 || !absl::SimpleAtoi(parts[1], &r.tokens) || r.tokens < 1 ||
      r.tokens > kMaxRandomTokens || (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &r.seed))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens '", source, "': expected random:L[:SEED] with 1 <= L <= ", kMaxRandomTokens,
        " and an integer SEED"));
  }
  return r;
}

}  // namespace

absl::StatusOr<Tensor> LoadTokens(const std::string& source, int64_t width) {
  if (!absl::StartsWith(source, "random:")) return ReadNpy(source);
  LACT_ASSIGN_OR_RETURN(const RandomSpec r, ParseRandom(source));
  return RandomNormalTokens(r.tokens, width, r.seed);
}

absl::StatusOr<std::optional<ContextSource>> RandomContextSource(const std::string& source,
                                                                 int64_t width) {
  if (!absl::StartsWith(source, "random:")) return std::nullopt;
  LACT_ASSIGN_OR_RETURN(const RandomSpec r, ParseRandom(source));
  return ContextSource{r.tokens, width,
                       [seed = r.seed, width](int64_t begin, int64_t n, float* out) {
                         RandomNormalValues(seed, begin * width, n * width, out);
                         return absl::OkStatus();
                       }};
}

namespace {

// ln(u) for u in (0, 1] (a normal float): u = m 2^e with m in [sqrt(1/2),
// sqrt(2)), ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, to s^9.
float LogUnit(float u) {
  const uint32_t bits = std::bit_cast<uint32_t>(u);
  int e = static_cast<int>(bits >> 23) - 127;
  float m = std::bit_cast<float>((bits & 0x7fffffu) | 0x3f800000u);
  const bool high = m > 1.41421356f;
  m = high ? 0.5f * m : m;
  e = high ? e + 1 : e;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return static_cast<float>(e) * 0.693147181f + 2.0f * s * series;
}

// Pairs of values from uniforms ru in [1, 2^24] (the radius's, over 2^24:
// (0, 1]) and rv in [0, 2^24) (the angle's, [0, 1)): out[2i] = radius *
// cos(angle), out[2i + 1] = radius * sin(angle). The angle 2 pi v is
// k pi/2 + phi with |phi| <= pi/4, whose sine and cosine come from Taylor
// series to phi^9 and phi^10 (error below 2e-9). Integer and float
// operations only, so the loop vectorises.
void NormalPairs(const int32_t* ru, const int32_t* rv, int64_t pairs, float* out) {
  constexpr float kTwo24 = 0x1.0p-24f, kQuarterPi = 0.785398163f;
  for (int64_t i = 0; i < pairs; ++i) {
    const float u = static_cast<float>(ru[i]) * kTwo24;
    const float t = static_cast<float>(rv[i]) * (8.0f * kTwo24);  // angle / (pi/4), [0, 8)
    const int k = static_cast<int>(0.5f * t + 0.5f);              // nearest multiple of pi/2
    const float phi = (t - 2.0f * static_cast<float>(k)) * kQuarterPi, p2 = phi * phi;
    const float sn =
        phi *
        (1.0f + p2 * (-1.0f / 6 + p2 * (1.0f / 120 + p2 * (-1.0f / 5040 + p2 * (1.0f / 362880)))));
    const float cs =
        1.0f + p2 * (-0.5f + p2 * (1.0f / 24 + p2 * (-1.0f / 720 +
                                                     p2 * (1.0f / 40320 - p2 * (1.0f / 3628800)))));
    // Rotated by k quarter turns (k = 4 is k = 0): (cos, sin) = (cs, sn),
    // (-sn, cs), (-cs, -sn), (sn, -cs) for k = 0, 1, 2, 3.
    const bool odd = (k & 1) != 0, flip_cos = ((k + 1) & 2) != 0, flip_sin = (k & 2) != 0;
    const float a = odd ? sn : cs, b = odd ? cs : sn;
    const float radius = std::sqrt(-2.0f * LogUnit(u));
    out[2 * i] = radius * (flip_cos ? -a : a);
    out[2 * i + 1] = radius * (flip_sin ? -b : b);
  }
}

// The stream is cut in blocks of values with streams of their own, so that
// the values do not depend on the thread count or on where a reader starts.
constexpr int64_t kBlock = 1 << 16;

// Block b's first `n` values (n <= kBlock; a block's values do not depend
// on how many are asked) into out, with ru and rv kBlock / 2 long.
void NormalBlock(uint64_t seed, int64_t b, int64_t n, int32_t* ru, int32_t* rv, float* out) {
  // Each block's stream starts from a hash of (seed, block), so that no
  // seed's stream is another's shifted.
  Random rng(Random(seed ^ (static_cast<uint64_t>(b) * 0xd1b54a32d192ed03ull)).NextU64());
  const int64_t pairs = (n + 1) / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    const uint64_t d = rng.NextU64();
    ru[i] = static_cast<int32_t>(d >> 40) + 1;
    rv[i] = static_cast<int32_t>((d >> 16) & 0xffffffu);
  }
  NormalPairs(ru, rv, pairs, out);
}

}  // namespace

Tensor RandomNormalTokens(int64_t tokens, int64_t width, uint64_t seed) {
  Tensor t = HugePageTensor({tokens, width});  // 1M tokens: a GiB of fresh pages
  const int64_t total = t.size(), blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel
  {
    std::vector<int32_t> ru(kBlock / 2), rv(kBlock / 2);
    std::vector<float> odd_tail(kBlock);  // a last block of odd length, before its copy
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = std::min(total, (b + 1) * kBlock) - b * kBlock;
      float* out = t.ptr() + b * kBlock;
      NormalBlock(seed, b, n, ru.data(), rv.data(), n % 2 == 0 ? out : odd_tail.data());
      if (n % 2 != 0) std::copy_n(odd_tail.begin(), n, out);
    }
  }
  return t;
}

void RandomNormalValues(uint64_t seed, int64_t first, int64_t n, float* out) {
  std::vector<int32_t> ru(kBlock / 2), rv(kBlock / 2);
  std::vector<float> edge;  // a block asked for from inside or to an odd end, made here first
  for (int64_t b = first / kBlock; b * kBlock < first + n; ++b) {
    const int64_t lo = std::max(first, b * kBlock), hi = std::min(first + n, (b + 1) * kBlock);
    const int64_t upto = hi - b * kBlock;  // the block's values needed, from its start
    if (lo == b * kBlock && upto % 2 == 0) {
      NormalBlock(seed, b, upto, ru.data(), rv.data(), out + (lo - first));
      continue;
    }
    edge.resize(kBlock);
    NormalBlock(seed, b, upto + upto % 2, ru.data(), rv.data(), edge.data());
    std::copy(edge.begin() + (lo - b * kBlock), edge.begin() + upto, out + (lo - first));
  }
}

}  // namespace lact::cli
