#include "kernels/cpu/mamba_mixer.h"

#include <cmath>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/ssd_scan.h"

namespace lact::cpu {

namespace {

// ws->xbc = silu(conv(proj xBC columns)); ws->dt = softplus(dt + dt_bias).
// `proj` holds the xBC columns at `xbc_col` and dt right after them.
void ConvAndDt(const ModelConfig& c, const MambaDirWeights& w, const float* proj, int64_t ld,
               int64_t xbc_col, int64_t T, float* conv_history, MixerWorkspace* ws) {
  const int64_t C = c.conv_channels(), hs = c.ssm_heads();
  ws->xbc.resize(T * C);
  ws->dt.resize(T * hs);
  CausalConvSilu(
      {T, C, c.ssm.conv_width, proj + xbc_col, ld, w.conv_w, w.conv_b, ws->xbc.data(), C},
      conv_history);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < hs; ++k)
      ws->dt[t * hs + k] = Softplus(proj[t * ld + xbc_col + C + k] + w.dt_bias[k]);
  }
}

ScanParams ScanOf(const ModelConfig& c, const MixerWorkspace& ws, int64_t T, const float* a,
                  const float* d_skip, float* y) {
  const int64_t di = c.d_inner(), N = c.ssm.d_state, C = c.conv_channels(), hs = c.ssm_heads();
  const float* xbc = ws.xbc.data();
  return {T,
          static_cast<int>(hs),
          c.ssm.head_dim,
          c.ssm.d_state,
          xbc,
          C,
          xbc + di,
          C,
          xbc + di + N,
          C,
          ws.dt.data(),
          hs,
          a,
          d_skip,
          y,
          di};
}

std::vector<float> NegExp(const float* a_log, int64_t n) {
  std::vector<float> a(n);
  for (int64_t k = 0; k < n; ++k) a[k] = -std::exp(a_log[k]);
  return a;
}

}  // namespace

void MambaSummarySegment(const ModelConfig& c, const MambaDirWeights& w, const float* h, int64_t T,
                         MixerStateView state, float* log_decay, MixerWorkspace* ws,
                         Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, di = c.d_inner(), R = c.in_proj_rows(), cols = R - di;
  ws->proj.resize(T * cols);
  Linear(h, D, T, D, w.in_proj + di * D, cols, ws->proj.data(), cols, 0.0f,
         operands);  // rows x, B, C, dt
  ConvAndDt(c, w, ws->proj.data(), cols, 0, T, state.conv, ws);
  const std::vector<float> a = NegExp(w.a_log, c.ssm_heads());
  SsdScanStateOnly(ScanOf(c, *ws, T, a.data(), nullptr, nullptr), state.ssm, log_decay);
}

namespace {

// The conv and the scan after the in projection (ws->proj, [T, R]): y the
// scan's output before the gated norm.
void ConvAndScan(const ModelConfig& c, const MambaDirWeights& w, int64_t T, MixerStateView state,
                 MixerWorkspace* ws, float* y, float* log_decay) {
  ConvAndDt(c, w, ws->proj.data(), c.in_proj_rows(), c.d_inner(), T, state.conv, ws);
  const std::vector<float> a = NegExp(w.a_log, c.ssm_heads());
  SsdScan(ScanOf(c, *ws, T, a.data(), w.d_skip, y), state.ssm, log_decay);
}

}  // namespace

void MambaMixerSegment(const ModelConfig& c, const MambaDirWeights& w, const float* h, int64_t T,
                       MixerStateView state, MixerWorkspace* ws, float* y, float* log_decay,
                       Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, di = c.d_inner(), R = c.in_proj_rows();
  ws->proj.resize(T * R);
  Linear(h, D, T, D, w.in_proj, R, ws->proj.data(), R, 0.0f, operands);
  ConvAndScan(c, w, T, state, ws, y, log_decay);
  GatedRmsNormRows(y, di, ws->proj.data(), R, T, di, w.norm);
}

void MambaMixerSegment(const ModelConfig& c, const MambaDirWeights& w, const uint16_t* h, int64_t T,
                       MixerStateView state, MixerWorkspace* ws, uint16_t* y, float* log_decay,
                       Operands operands) {
  if (T == 0) return;
  const int64_t D = c.d_model, di = c.d_inner(), R = c.in_proj_rows();
  ws->proj.resize(T * R);
  ws->y.resize(T * di);
  Linear(h, T, D, w.in_proj, R, ws->proj.data(), R, 0.0f, operands);
  ConvAndScan(c, w, T, state, ws, ws->y.data(), log_decay);
  GatedRmsNormRowsToBf16(ws->y.data(), di, ws->proj.data(), R, T, di, w.norm, y);
}

}  // namespace lact::cpu
