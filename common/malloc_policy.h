// How a lact process asks glibc to treat the memory it frees.
#ifndef LACT_COMMON_MALLOC_POLICY_H_
#define LACT_COMMON_MALLOC_POLICY_H_

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

}  // namespace lact

#endif  // LACT_COMMON_MALLOC_POLICY_H_
