// A small deterministic random source (SplitMix64 + Box-Muller) whose output
// is the same on every platform and compiler, so a preset or random context
// named by seed is the same tensor on every worker.
#ifndef LACT_COMMON_RANDOM_H_
#define LACT_COMMON_RANDOM_H_

#include <cstdint>

namespace lact {

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t NextU64() {  // inline: the random-token loops call it per pair
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform();  // [0, 1)
  double Normal();   // standard normal

 private:
  uint64_t state_;
};

}  // namespace lact

#endif  // LACT_COMMON_RANDOM_H_
