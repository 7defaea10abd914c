#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace lact {

void AdviseHugePages(void* data, size_t bytes) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (start + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (start + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

Tensor HugePageTensor(std::vector<int64_t> shape, FaultIn fault_in) {
  Tensor t;
  const int64_t n = Tensor::NumElements(shape);
  t.shape = std::move(shape);
  GrowHugePages(&t.data, n, fault_in);
  return t;
}

}  // namespace lact
