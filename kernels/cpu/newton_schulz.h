// Muon's Newton-Schulz iteration on one matrix (docs/model.md, LaCT), in
// float32 or as upstream LaCT runs it in bf16 (docs/upstream.md).
#ifndef LACT_KERNELS_CPU_NEWTON_SCHULZ_H_
#define LACT_KERNELS_CPU_NEWTON_SCHULZ_H_

#include <cstdint>

namespace lact::cpu {

// In place: g [rows, cols] <- NS(g): g / (||g||_F + 1e-7), transposed when
// rows > cols, `steps` quintic iterations, transposed back; steps = 0 leaves
// the normalised g. With bf16, g is rounded to bf16 first and every result
// after it (the norm, the quotient, each product, scaling and sum) is
// rounded to bf16 (nearest even), products accumulating in float32: the
// arithmetic of torch's bf16 tensors that upstream LaCT's iteration uses.
void NewtonSchulz(float* g, int64_t rows, int64_t cols, int steps, bool bf16 = false);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_NEWTON_SCHULZ_H_
