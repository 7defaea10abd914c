#include "common/malloc_policy.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"

namespace lact {

void KeepFreedMemory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);  // -1: never trim (any other value is at most 2 GiB)
}

absl::Status WarmHeap(int64_t bytes) {
  if (bytes <= 0) return absl::OkStatus();
  const size_t size = static_cast<size_t>(bytes);
  char* block = static_cast<char*>(std::malloc(size));
  if (block == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot grow the heap by ", bytes, " bytes to warm it"));
  }
  AdviseHugePages(block, size);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile char* touch = block;
  for (size_t i = 0; i < size; i += page) touch[i] = 0;
  touch[size - 1] = 0;
  std::free(block);
  return absl::OkStatus();
}

}  // namespace lact
