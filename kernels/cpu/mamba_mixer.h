// One direction of the BiMamba mixer (docs/model.md, BiMamba) over a segment of
// tokens given in scan order, carrying the direction's state across calls:
//   proj = h @ in_proj^T -> z, xBC, dt;  xBC = silu(conv(xBC));
//   y = scan(x, B, C, softplus(dt + dt_bias));  y = rmsnorm(y * silu(z), norm)
// Calling it on consecutive segments with the same MixerState equals one
// call on their concatenation. Scratch is owned by the MixerWorkspace and
// reused; a workspace is not shared between threads.
#ifndef LACT_KERNELS_CPU_MAMBA_MIXER_H_
#define LACT_KERNELS_CPU_MAMBA_MIXER_H_

#include <cstdint>
#include <vector>

#include "common/model.h"
#include "kernels/cpu/blas.h"

namespace lact::cpu {

struct MixerWorkspace {
  std::vector<float> proj, xbc, dt, y;
};

// ssm: [H_s, P, N]; conv: [W-1, d_inner + 2N] (the direction's history).
struct MixerStateView {
  float* ssm;
  float* conv;
};

// h: [T, D] (row stride D); y: [T, d_inner] (row stride d_inner).
// `log_decay` ([H_s] or null) has the segment's sum of dt * A added to it.
// With Operands::kBf16, h and in_proj must come rounded to bf16: the
// projection is a bf16 GEMM (Gemm in blas.h); the rest stays float32.
void MambaMixerSegment(const ModelConfig& config, const MambaDirWeights& w, const float* h,
                       int64_t tokens, MixerStateView state, MixerWorkspace* ws, float* y,
                       float* log_decay = nullptr, Operands operands = Operands::kFp32);

// The same for the bf16 mode on the bf16 matmul, with h made as bf16 by
// the caller ([T, D] dense) and y written as bf16 ([T, d_inner] dense, the
// out projection's operand, rounded to nearest even from what the float32
// overload writes).
void MambaMixerSegment(const ModelConfig& config, const MambaDirWeights& w, const uint16_t* h,
                       int64_t tokens, MixerStateView state, MixerWorkspace* ws, uint16_t* y,
                       float* log_decay, Operands operands);

// The summary pre-pass of a segment: the same projection, conv and scan but
// only the x, B, C, dt rows and only the state. `state.ssm` and `log_decay`
// ([H_s], added to) accumulate from whatever they hold; conv history as above.
void MambaSummarySegment(const ModelConfig& config, const MambaDirWeights& w, const float* h,
                         int64_t tokens, MixerStateView state, float* log_decay, MixerWorkspace* ws,
                         Operands operands = Operands::kFp32);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_MAMBA_MIXER_H_
