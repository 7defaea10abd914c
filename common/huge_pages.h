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

// Touches every page of a new buffer [data, data + bytes) before its
// elements are made, e.g. on a thread pool (cpu::FaultInPages), so its
// pages' first-touch faults run there instead of in the zero fill that
// follows; whatever it writes is overwritten by that fill.
using FaultIn = void (*)(char* data, size_t bytes);

// A zero-filled tensor of `shape` whose buffer was advised (above) before
// its pages were first touched (by `fault_in` when given).
Tensor HugePageTensor(std::vector<int64_t> shape, FaultIn fault_in = nullptr);

// v grown to `size` elements (zeros appended) as `resize` would, a new
// buffer advised before its pages are first touched (by `fault_in` when
// given); no-op if v is as large.
template <typename T>
void GrowHugePages(std::vector<T>* v, int64_t size, FaultIn fault_in = nullptr) {
  const size_t n = static_cast<size_t>(size);
  if (v->size() >= n) return;
  if (v->capacity() < n) {
    std::vector<T> grown;
    grown.reserve(n);
    AdviseHugePages(grown.data(), n * sizeof(T));
    if (fault_in != nullptr) fault_in(reinterpret_cast<char*>(grown.data()), n * sizeof(T));
    grown.assign(v->begin(), v->end());
    v->swap(grown);
  }
  v->resize(n);
}

}  // namespace lact

#endif  // LACT_COMMON_HUGE_PAGES_H_
