#include "common/malloc_policy.h"

#include <malloc.h>

#include <limits>

namespace lact {

void KeepFreedMemory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

}  // namespace lact
