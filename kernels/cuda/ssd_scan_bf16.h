// The bf16 mode's selective scan on the tensor cores: the recurrence of
// ssd_scan.h's SsdScan, per head h and channel p,
//   S(t) = exp(dt_t[h] A[h]) S(t-1) + dt_t[h] outer(x_t[p], B_t),  A = -exp(a_log)
//   y_t[p] = S(t) @ C_t + d_skip[h] x_t[p]
// with x, B and C read as bf16 and y written as bf16; dt, the state, the
// log decay and every accumulation stay fp32.
//
// The tokens are cut into chunks of 64 and the chunks into segments. One
// block per (segment, head) walks its segment's chunks with the running
// state on chip (fp32 wmma accumulators), each chunk's products on bf16
// wmma (m16n16k16, fp32 accumulation); no per-chunk state goes to memory.
// Three launches per scan: the segments' states from zero, the walk of the
// segments in order (ssd_pass_states.h), then the segments again from their
// carry-in states with outputs. The state-only scan (y null) is the first
// two.
//
// Where it rounds beyond its bf16 inputs, each a relative 2^-9 of one term:
// the intra-chunk mixing weights G_ij exp(cum_i - cum_j) dt_j, the decayed
// C_i exp(cum_i) and B_j exp(cum_last - cum_j) dt_j, the carry-in state as
// the operand of y's product (the state itself is carried in fp32), and y.
// tests/cuda_ssd_bf16_test.cc states the bound this gives against the
// float64 recurrence.
//
// All pointers are device pointers; everything is enqueued on `s`.
#ifndef LACT_KERNELS_CUDA_SSD_SCAN_BF16_H_
#define LACT_KERNELS_CUDA_SSD_SCAN_BF16_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/ssd_scan.h"

namespace lact::cuda {

// The largest head_dim and d_state the bf16 scan takes (its tiles hold a
// whole head's state: 64 x 128 fp32 accumulators over one block's warps).
inline constexpr int kSsdBf16MaxHeadDim = 64;
inline constexpr int kSsdBf16MaxState = 128;

// One scan: shapes, device pointers and row strides, as SsdScanParams.
// Row strides may be negative (the backward direction: the rows' last row
// and negated strides; y is written back in sequence order). Every row
// start should be 16-byte aligned for the fast path (8 bf16 at a time);
// others are read element by element.
struct SsdScanBf16Params {
  int64_t tokens;          // T >= 0; 0 is a no-op
  int heads;               // H
  int head_dim;            // P <= kSsdBf16MaxHeadDim
  int d_state;             // N <= kSsdBf16MaxState
  const __nv_bfloat16* x;  // [T, H*P], row stride ldx
  int64_t ldx;
  const __nv_bfloat16* b;  // [T, N] (shared by all heads)
  int64_t ldb;
  const __nv_bfloat16* c;  // [T, N]; unused without y
  int64_t ldc;
  const float* dt;  // [T, H] after softplus
  int64_t lddt;
  const float* a_log;   // [H]: A = -exp(a_log)
  const float* d_skip;  // [H], or null for no skip term
  __nv_bfloat16* y;     // [T, H*P], not overlapping the inputs; null: state only
  int64_t ldy;
  // Chunks of 64 tokens per segment; 0: automatic (about two blocks per
  // multiprocessor over all heads).
  int64_t segment_chunks = 0;
};

// Scans `p`: `state` [H, P, N] fp32 is the initial state on entry and the
// final state on return; `log_decay` [H] (may be null) gets sum_t dt_t A
// added. `ws` holds the segments' states (its SsdMath is not used).
// INVALID_ARGUMENT names a bad shape, pointer or stride and what is
// allowed; launch failures are INTERNAL.
absl::Status SsdScanBf16(cudaStream_t s, SsdWorkspace& ws, const SsdScanBf16Params& p, float* state,
                         float* log_decay);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_SSD_SCAN_BF16_H_
