// The state passing of the chunked (SSD) scans, shared by the fp32 scan
// (ssd_scan.cu) and the bf16 tensor-core scan (ssd_scan_bf16.cu). A scan
// cuts its tokens into segments, computes each segment's state from zero
// and its log decay in parallel, then walks the segments in order here:
//   s <- exp(decay_g) s + states_g,   g = 0, 1, ...
// starting from the incoming state.
#ifndef LACT_KERNELS_CUDA_SSD_PASS_STATES_H_
#define LACT_KERNELS_CUDA_SSD_PASS_STATES_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace lact::cuda {

// The segments' results, device pointers: `states` [segments][H][N][P], each
// segment's state reached from zero, transposed (S^T: row n, column p);
// `decay` [segments][H], each segment's log decay (sum of dt A).
struct SegmentStates {
  int64_t segments;
  float* states;
  const float* decay;
};

// Enqueues on `s` the walk of `g`'s segments for every head, one thread per
// entry of a head's state. `state` [H][P][N] is the incoming state on entry
// and the final state on return; `log_decay` [H] (may be null) gets every
// segment's decay added. With `write_carry`, each segment's slot of
// g.states is overwritten with the state entering it (what a second pass
// over the segments starts from). Returns the launch's status (INTERNAL).
absl::Status PassSegmentStates(cudaStream_t s, int heads, int head_dim, int d_state,
                               const SegmentStates& g, bool write_carry, float* state,
                               float* log_decay);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_SSD_PASS_STATES_H_
