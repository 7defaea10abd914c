// Asks the kernel to back a large buffer with transparent huge pages
// (2 MiB) where the system leaves them to madvise: the buffer's first
// touches then fault 512 times less often. Only the whole 2 MiB blocks
// inside [data, data + bytes) are advised; nothing is touched or
// allocated. Best effort: a kernel without THP leaves the buffer as it is.
#ifndef LACT_COMMON_HUGE_PAGES_H_
#define LACT_COMMON_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace lact {

void AdviseHugePages(void* data, size_t bytes);

// A zero-filled tensor of `shape` whose buffer was advised (above) before
// its pages were first touched.
Tensor HugePageTensor(std::vector<int64_t> shape);

// v grown to `size` elements (zeros appended) as `resize` would, a new
// buffer advised before its pages are first touched; no-op if v is as large.
template <typename T>
void GrowHugePages(std::vector<T>* v, int64_t size) {
  const size_t n = static_cast<size_t>(size);
  if (v->size() >= n) return;
  if (v->capacity() < n) {
    std::vector<T> grown;
    grown.reserve(n);
    AdviseHugePages(grown.data(), n * sizeof(T));
    grown.assign(v->begin(), v->end());
    v->swap(grown);
  }
  v->resize(n);
}

}  // namespace lact

#endif  // LACT_COMMON_HUGE_PAGES_H_
