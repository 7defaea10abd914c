// How a lact process asks glibc to treat the memory it frees, and how a
// worker warms the memory its first job will use.
#ifndef LACT_COMMON_MALLOC_POLICY_H_
#define LACT_COMMON_MALLOC_POLICY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace lact {

// Keeps freed memory in the heap instead of handing it back to the kernel.
// A worker runs job after job, and a client receives a job's outputs in
// 4 MiB messages, each allocating and freeing large blocks; glibc would
// unmap or trim them on free and fault fresh pages in for the next, and on
// a VM those first touches cost more than the copies themselves. One arena
// (threads' arenas would still map large blocks afresh), no mmap, no trim:
// the process's RSS stays near its peak, as with any caching allocator.
// Call it first in main, before any thread starts.
void KeepFreedMemory();

// Grows the heap by `bytes`, touches every page of it (in transparent huge
// pages where the system allows) and frees it again, where KeepFreedMemory
// keeps it: the large buffers the process allocates next take these pages
// and never wait for fresh ones, as a first job would otherwise (a
// worker's tokens, accumulator and held outputs: 1.5 GiB for each half of
// a 1M-token preset:small job). The pages stay the process's until it
// exits. Call it after KeepFreedMemory, before the process takes work;
// bytes <= 0 does nothing. ResourceExhausted if the heap cannot grow so.
absl::Status WarmHeap(int64_t bytes);

// The most a worker's --warm-bytes (and lact local's, passed on) accepts.
constexpr int64_t kMaxWarmBytes = int64_t{1} << 44;

}  // namespace lact

#endif  // LACT_COMMON_MALLOC_POLICY_H_
