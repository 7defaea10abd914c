// The Mamba-2 selective scan of docs/model.md, BiMamba on the GPU, in chunked
// (SSD) form: the CUDA counterpart of kernels/cpu/ssd_scan.h, fp32 throughout
// (state and accumulation included, no TF32). For one segment of T tokens in
// scan order, per head h and channel p of that head:
//   S(t) = exp(dt_t[h] A[h]) S(t-1) + dt_t[h] outer(x_t[p], B_t),  A = -exp(a_log)
//   y_t[p] = S(t) @ C_t + d_skip[h] x_t[p]
// The tokens are cut into chunks of 64; within a chunk the recurrence is
// evaluated as matrix products, and the state is carried from chunk to chunk.
// Long segments are scanned in windows of chunks so that the scratch stays
// bounded (SsdWorkspace); the windows run one after another on the stream.
//
// All pointers are device pointers; everything is enqueued on the given
// stream and the returned status is that of the launches (a failing kernel
// shows up at the next synchronization).
#ifndef LACT_KERNELS_CUDA_SSD_SCAN_H_
#define LACT_KERNELS_CUDA_SSD_SCAN_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"

namespace lact::cuda {

// How the scan's matrix products run: on the fp32 cores (the default, the
// kernel the H200 run measured), or on the tensor cores as 3xTF32 (each
// operand split into a tf32 head and the tf32 of its remainder, three
// products, fp32 accumulation: about fp32's accuracy; sm_80 and later).
// kBf16 is another kernel, SsdScanBf16 (ssd_scan_bf16.h): bf16 inputs and
// outputs, bf16 products, for the bf16 precision only; SsdScan itself
// takes it as kFp32.
enum class SsdMath { kFp32, kTf32x3, kBf16 };

// "fp32", "tf32x3" or "bf16"; INVALID_ARGUMENT naming the allowed values
// otherwise.
absl::StatusOr<SsdMath> ParseSsdMath(const std::string& name);

// Scratch for SsdScan, grown on demand (cudaMalloc only when it must grow),
// and the scan's SsdMath. One per stream of work: the kernels of a scan use
// it until they complete. Not thread-safe.
class SsdWorkspace {
 public:
  SsdWorkspace() = default;
  // At most `max_window_chunks` chunks of 64 tokens per window of the scan
  // with outputs (0: automatic, about 32 MB of scratch): a smaller bound
  // means less scratch and more, smaller launches.
  explicit SsdWorkspace(int64_t max_window_chunks, SsdMath math = SsdMath::kFp32)
      : max_window_chunks_(max_window_chunks), math_(math) {}

  int64_t max_window_chunks() const { return max_window_chunks_; }
  SsdMath math() const { return math_; }

  // At least `floats` floats of scratch. Growing first synchronizes `s`,
  // whose pending kernels may still use the old buffer.
  absl::StatusOr<float*> Reserve(cudaStream_t s, size_t floats);

 private:
  int64_t max_window_chunks_ = 0;
  SsdMath math_ = SsdMath::kFp32;
  DeviceBuffer buffer_;
};

// One segment's scan, per head h and channel p: shapes, device pointers
// and row strides. Row strides may be negative: the backward direction
// passes its rows' last row and negated strides, so the scan walks them in
// reverse and writes y back in sequence order.
struct SsdScanParams {
  int64_t tokens;  // T >= 0; 0 is a no-op
  int heads;       // H
  int head_dim;    // P
  int d_state;     // N
  const float* x;  // [T, H*P], row stride ldx
  int64_t ldx;
  const float* b;  // [T, N] (shared by all heads), row stride ldb
  int64_t ldb;
  const float* c;  // [T, N], row stride ldc; unused without y
  int64_t ldc;
  const float* dt;  // [T, H] after softplus, row stride lddt
  int64_t lddt;
  const float* a_log;   // [H]: A = -exp(a_log)
  const float* d_skip;  // [H], or null for no skip term; unused without y
  // [T, H*P], row stride ldy, not overlapping the inputs; null: only the
  // state (and log_decay) are computed (the cheap "summary" pre-pass).
  float* y;
  int64_t ldy;
};

// Where a scan's rows are, laid out as the Mamba mixer makes them: row t
// of `xbc` holds x [heads * head_dim], then B [d_state], then C [d_state];
// `dt` and `y` have rows of their own. The pointers name the first row the
// scan takes; `step` 1 walks the rows forward, -1 backward (the backward
// direction: pointers at the last row, the strides negated for it).
template <class T>
struct MixerRows {
  const T* xbc;
  int64_t ld;  // row stride of xbc
  const float* dt;
  int64_t lddt;
  T* y;  // null: the state only
  int64_t ldy;
  int64_t step = 1;
};

// The element type of a scan's x: float (SsdScanParams), __nv_bfloat16
// (SsdScanBf16Params).
template <class Params>
using ScanElement = std::remove_cv_t<std::remove_pointer_t<decltype(Params::x)>>;

// SsdScanParams or SsdScanBf16Params (whose fields are named alike) of a
// scan over `rows`.
template <class Params>
Params MixerScan(int64_t tokens, int heads, int head_dim, int d_state,
                 const MixerRows<ScanElement<Params>>& rows, const float* a_log,
                 const float* d_skip) {
  const int64_t width = int64_t{heads} * head_dim, ld = rows.step * rows.ld;
  return Params{.tokens = tokens,
                .heads = heads,
                .head_dim = head_dim,
                .d_state = d_state,
                .x = rows.xbc,
                .ldx = ld,
                .b = rows.xbc + width,
                .ldb = ld,
                .c = rows.xbc + width + d_state,
                .ldc = ld,
                .dt = rows.dt,
                .lddt = rows.step * rows.lddt,
                .a_log = a_log,
                .d_skip = d_skip,
                .y = rows.y,
                .ldy = rows.step * rows.ldy};
}

// Scans `p`: `state` [H, P, N] is the initial state on entry and the final
// state on return; `log_decay` [H] (may be null) gets sum_t dt_t[h] A[h]
// added. Shapes and strides (by magnitude) are checked here
// (INVALID_ARGUMENT); launch failures are INTERNAL.
absl::Status SsdScan(cudaStream_t s, SsdWorkspace& ws, const SsdScanParams& p, float* state,
                     float* log_decay);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_SSD_SCAN_H_
