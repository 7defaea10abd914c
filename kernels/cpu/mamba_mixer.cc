#include "kernels/cpu/mamba_mixer.h"

#include <cmath>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/ssd_scan.h"

namespace lact::cpu {

void MambaMixerSegment(const ModelConfig& c, const MambaDirWeights& w, const float* h, int64_t T,
                       MixerStateView state, MixerWorkspace* ws, float* y) {
  if (T == 0) return;
  const int64_t D = c.d_model, di = c.d_inner(), N = c.ssm.d_state, hs = c.ssm_heads();
  const int64_t C = c.conv_channels(), R = c.in_proj_rows();
  ws->proj.resize(T * R);
  ws->xbc.resize(T * C);
  ws->dt.resize(T * hs);
  float* proj = ws->proj.data();
  Linear(h, D, T, D, w.in_proj, R, proj, R);

  CausalConvSilu({T, C, c.ssm.conv_width, proj + di, R, w.conv_w, w.conv_b, ws->xbc.data(), C}, state.conv);

  std::vector<float> a(hs);
  for (int64_t k = 0; k < hs; ++k) a[k] = -std::exp(w.a_log[k]);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < hs; ++k) ws->dt[t * hs + k] = Softplus(proj[t * R + di + C + k] + w.dt_bias[k]);
  }
  const float* xbc = ws->xbc.data();
  ScanParams scan{T,        static_cast<int>(hs), c.ssm.head_dim, c.ssm.d_state, xbc,     C, xbc + di, C,
                  xbc + di + N, C, ws->dt.data(), hs, a.data(), w.d_skip, y, di};
  SsdScan(scan, state.ssm, nullptr);

#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * di;
    const float* z = proj + t * R;
    for (int64_t k = 0; k < di; ++k) yt[k] *= Silu(z[k]);
  }
  RmsNormRows(y, di, T, di, w.norm, y, di);
}

}  // namespace lact::cpu
