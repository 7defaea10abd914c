#include "kernels/cpu/conv.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/elementwise.h"

namespace lact::cpu {

void CausalConvSilu(const ConvParams& p, float* history) {
  const int64_t T = p.tokens, C = p.channels;
  const int W = p.width;
  // Weights transposed to [W, C] so the channel loop is contiguous.
  std::vector<float> wt(static_cast<size_t>(W) * C);
  for (int64_t c = 0; c < C; ++c)
    for (int j = 0; j < W; ++j) wt[j * C + c] = p.weight[c * W + j];
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* o = p.out + t * p.ldo;
    std::copy(p.bias, p.bias + C, o);
    for (int j = 0; j < W; ++j) {
      const int64_t src = t - (W - 1) + j;  // < 0: from history
      const float* in = src >= 0 ? p.u + src * p.ldu : history + (W - 1 + src) * C;
      const float* wj = wt.data() + j * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] += wj[c] * in[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = Silu(o[c]);
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
