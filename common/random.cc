#include "common/random.h"

#include <cmath>

namespace lact {

double Random::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double Random::Normal() {
  const double u1 = 1.0 - Uniform();  // (0, 1]
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace lact
