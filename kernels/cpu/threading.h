// One OpenMP thread pool for everything: oneDNN and OpenBLAS are their
// OpenMP builds, so a matrix product made inside one of our parallel
// regions runs on the calling thread and they never oversubscribe the
// cores.
#ifndef LACT_KERNELS_CPU_THREADING_H_
#define LACT_KERNELS_CPU_THREADING_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace lact::cpu {

// Sets the thread count for our loops and for BLAS; n <= 0 means all cores.
// Process-wide; call before running, not concurrently with kernels.
void SetNumThreads(int n);
int NumThreads();

// Writes a zero byte to every 4 KiB page of [data, data + bytes), the pool's
// threads each taking a contiguous part at once: a new buffer's first-touch
// faults then run on every core instead of on the one thread that first
// fills it (on a VM, 1-3 ms per MiB). A huge_pages.h FaultIn.
void FaultInPages(char* data, size_t bytes);

// The shortest slice worth a thread of its own: below it, a GEMM's own
// threading (the library splitting it) does better.
constexpr int64_t kMinSliceRows = 256;

// Splits rows [0, n) into contiguous slices, one per thread and at least
// `min_rows` rows each, and runs fn(begin, count, slot) for every slice at
// once, each on a thread of its own; slot numbers the slices from 0 in row
// order (slot < NumThreads()). Everything fn calls runs on its thread:
// nested parallel loops and matrix products inside it stay single-threaded
// (NumThreads() is 1 there), so a row-independent op gets whole cores
// instead of split GEMMs. With one thread, fewer than 2 * min_rows rows,
// or inside a parallel region, it is fn(0, n, 0) on the caller. Returns
// the number of slices run (>= 1).
int ForRowSlices(int64_t n, int64_t min_rows, absl::FunctionRef<void(int64_t, int64_t, int)> fn);

// Turns ForRowSlices' splitting on (the default) or off (every call one
// slice on the caller, each GEMM threaded by its library), process-wide: the
// baseline that bench_ops measures the slices against. Call between runs.
void SetRowSlices(bool on);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_THREADING_H_
