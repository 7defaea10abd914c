// The emulator's own count of the work enqueued on its streams, and its dry
// run. In a dry run every kernel launch and GEMM is checked as always (its
// arguments against the live allocations, its shapes, its shared memory)
// and counted, but not run: a long context's whole launch sequence is
// walked in seconds, for the traffic bench. Copies and memsets still run.
#ifndef LACT_TOOLS_CUDA_EMU_EMU_COUNTS_H_
#define LACT_TOOLS_CUDA_EMU_EMU_COUNTS_H_

#include <cstdint>

namespace emu {

struct WorkCounts {
  int64_t kernels = 0;        // kernel launches
  int64_t gemms = 0;          // cuBLAS GEMM calls (a batched one counts once)
  int64_t device_copies = 0;  // device-to-device cudaMemcpyAsync
  int64_t memsets = 0;        // cudaMemsetAsync
};

WorkCounts Counts();
void ResetCounts();
void SetDryRun(bool dry);
bool DryRun();
void CountKernel();

}  // namespace emu

#endif  // LACT_TOOLS_CUDA_EMU_EMU_COUNTS_H_
