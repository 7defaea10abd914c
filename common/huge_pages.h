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

}  // namespace lact

#endif  // LACT_COMMON_HUGE_PAGES_H_
