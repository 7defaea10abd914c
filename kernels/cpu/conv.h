// The causal depthwise conv of docs/model.md, BiMamba followed by silu, over one
// segment of T tokens:
//   out_t[c] = silu(bias[c] + sum_{j<W} w[c, j] * u_{t-W+1+j}[c])
// where inputs before the segment come from `history` ([W-1, C], oldest row
// first). On return `history` holds the last W-1 inputs of (history ++ u):
// the conv state, and the halo a right-hand neighbour needs. Segments run
// one after another with the history carried are exactly the whole sequence.
#ifndef LACT_KERNELS_CPU_CONV_H_
#define LACT_KERNELS_CPU_CONV_H_

#include <cstdint>

namespace lact::cpu {

struct ConvParams {
  int64_t tokens;    // T >= 0
  int64_t channels;  // C
  int width;         // W >= 1
  const float* u;    // [T, C], row stride ldu
  int64_t ldu;
  const float* weight;  // [C, W]
  const float* bias;    // [C]
  float* out;           // [T, C], row stride ldo; must not alias u
  int64_t ldo;
};

void CausalConvSilu(const ConvParams& p, float* history);

// Advances a conv history by a segment's inputs without computing outputs:
// history = last W-1 rows of (history ++ u). Used to compose boundary rows.
void AdvanceConvHistory(const float* u, int64_t ldu, int64_t tokens, int64_t channels, int width,
                        float* history);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_CONV_H_
