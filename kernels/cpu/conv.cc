#include "kernels/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/simd.h"

namespace lact::cpu {

namespace {

// One output row: o[c] = silu(bias[c] + sum_j w[j, c] in[j][c]), the taps
// summed in j order in a register, o written once. Inlined, so a constant
// W (the presets' 4) unrolls the tap loop.
inline void ConvRow(const float* const* in, const float* wt, const float* bias, int64_t C, int W,
                    float* o) {
  ForEachVector(C, [&](int64_t c, auto like) {
    auto acc = LoadLike(like, bias + c);
    for (int j = 0; j < W; ++j) acc += LoadLike(like, wt + j * C + c) * LoadLike(like, in[j] + c);
    Put(SiluOf(acc), o + c);
  });
}

}  // namespace

void CausalConvSilu(const ConvParams& p, float* history) {
  const int64_t T = p.tokens, C = p.channels;
  const int W = p.width;
  // Weights transposed to [W, C] so the channel loop is contiguous.
  std::vector<float> wt(static_cast<size_t>(W) * C);
  for (int64_t c = 0; c < C; ++c)
    for (int j = 0; j < W; ++j) wt[j * C + c] = p.weight[c * W + j];
#pragma omp parallel
  {
    std::vector<const float*> in(W);  // the rows of the W taps
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int j = 0; j < W; ++j) {
        const int64_t src = t - (W - 1) + j;  // < 0: from history
        in[j] = src >= 0 ? p.u + src * p.ldu : history + (W - 1 + src) * C;
      }
      float* o = p.out + t * p.ldo;
      if (W == 4) {
        ConvRow(in.data(), wt.data(), p.bias, C, 4, o);
      } else {
        ConvRow(in.data(), wt.data(), p.bias, C, W, o);
      }
    }
  }
  AdvanceConvHistory(p.u, p.ldu, T, C, W, history);
}

void AdvanceConvHistory(const float* u, int64_t ldu, int64_t tokens, int64_t channels, int width,
                        float* history) {
  const int64_t keep = width - 1;
  if (keep <= 0) return;
  // Rows of (history ++ u) from index tokens to tokens + keep - 1.
  std::vector<float> next(static_cast<size_t>(keep) * channels);
  for (int64_t r = 0; r < keep; ++r) {
    const int64_t src = tokens + r;  // index into (history ++ u)
    const float* row = src < keep ? history + src * channels : u + (src - keep) * ldu;
    std::copy(row, row + channels, next.begin() + r * channels);
  }
  std::copy(next.begin(), next.end(), history);
}

}  // namespace lact::cpu
