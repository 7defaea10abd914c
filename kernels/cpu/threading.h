// One OpenMP thread pool for everything: OpenBLAS is its OpenMP build, so a
// BLAS call made inside one of our parallel regions runs on the calling
// thread and the two never oversubscribe the cores.
#ifndef LACT_KERNELS_CPU_THREADING_H_
#define LACT_KERNELS_CPU_THREADING_H_

namespace lact::cpu {

// Sets the thread count for our loops and for BLAS; n <= 0 means all cores.
// Process-wide; call before running, not concurrently with kernels.
void SetNumThreads(int n);
int NumThreads();

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_THREADING_H_
