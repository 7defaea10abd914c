// The Mamba-2 selective scan of docs/model.md, BiMamba in chunked (SSD) form, for
// one segment of T tokens in scan order (the backward direction is scanned
// by feeding the segment reversed). Per head h, channels p of that head:
//   S(t) = exp(dt_t[h] A[h]) S(t-1) + dt_t[h] outer(x_t[p], B_t)
//   y_t[p] = S(t) @ C_t + D[h] x_t[p]
// Inside a chunk of kChunk tokens the recurrence is evaluated as matrix
// products (C B^T masked by the decay, then the state carried between chunks).
//
// Segments compose exactly: a segment scanned from a zero state yields its
// summary (log of the decay product, state reached from zero); summaries of
// neighbouring segments combine with ComposeScanSummary into the state that
// enters the next segment, and SsdAddCarry adds that carry's contribution to
// the outputs of a segment scanned from zero.
#ifndef LACT_KERNELS_CPU_SSD_SCAN_H_
#define LACT_KERNELS_CPU_SSD_SCAN_H_

#include <cstdint>

namespace lact::cpu {

struct ScanParams {
  int64_t tokens;  // T >= 0
  int heads;       // H_s
  int head_dim;    // P
  int d_state;     // N
  const float* x;  // [T, H_s*P], row stride ldx
  int64_t ldx;
  const float* b;  // [T, N], row stride ldb
  int64_t ldb;
  const float* c;  // [T, N], row stride ldc
  int64_t ldc;
  const float* dt;  // [T, H_s] after softplus, row stride lddt
  int64_t lddt;
  const float* a;       // [H_s], A = -exp(A_log)
  const float* d_skip;  // [H_s] or null for no skip term
  float* y;             // [T, H_s*P], row stride ldy
  int64_t ldy;
};

// Scans the segment starting from `state` ([H_s, P, N], updated to the final
// state). `log_decay` ([H_s], may be null) has sum_t dt_t A added to it.
void SsdScan(const ScanParams& p, float* state, float* log_decay);

// The state part of SsdScan only (no outputs; p.c, p.y and p.d_skip unused):
// state <- state after the segment, log_decay[h] += sum_t dt_t A. This is the
// cheap pre-pass that yields a segment's summary.
void SsdScanStateOnly(const ScanParams& p, float* state, float* log_decay);

// y_t[p] += exp(sum_{s<=t} dt_s A) * (carry_h @ C_t)[p] for every token:
// the part of the output that a carry-in state contributes.
void SsdAddCarry(const ScanParams& p, const float* carry);

// Summary of `first` followed by `second` (per head, `per_head` = P*N state
// values): out_state = exp(second_log_decay) * first_state + second_state,
// out_log_decay = first_log_decay + second_log_decay. Outputs may alias inputs.
void ComposeScanSummary(int heads, int64_t per_head, const float* first_state,
                        const float* first_log_decay, const float* second_state,
                        const float* second_log_decay, float* out_state, float* out_log_decay);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_SSD_SCAN_H_
