#include "common/tensor.h"

#include "absl/strings/str_join.h"

namespace lact {

int64_t CheckedNumElements(const std::vector<int64_t>& shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) return limit >= 0 ? 0 : -1;
  }
  for (int64_t d : shape) {
    if (n > limit / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

}  // namespace lact
