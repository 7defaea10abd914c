// Model FLOPs of docs/model.md per context token of one layer, counted from the
// spec, not from any implementation: a linear layer is 2*in*out per token,
// the selective scan 4*P*N per head per direction (its recurrence), the
// depthwise conv 2*W per channel, elementwise passes a few FLOPs per value.
// The BiMamba output projection is counted once (docs/model.md applies it to the sum
// of the directions).
#ifndef LACT_BENCH_FLOPS_H_
#define LACT_BENCH_FLOPS_H_

#include "common/model_config.h"

namespace lact::bench {

struct LayerFlops {
  double in_proj, conv, scan, gated_norm, out_proj;  // BiMamba (both directions)
  double qkv_lr, ttt_update, ttt_apply, o_proj;      // LaCT
  double mlp, norms;
  double total() const {
    return in_proj + conv + scan + gated_norm + out_proj + qkv_lr + ttt_update + ttt_apply +
           o_proj + mlp + norms;
  }
};

inline LayerFlops PerTokenFlops(const ModelConfig& c) {
  const double D = c.d_model, di = c.d_inner(), N = c.ssm.d_state, P = c.ssm.head_dim,
               hs = c.ssm_heads();
  const double C = c.conv_channels(), R = c.in_proj_rows(), W = c.ssm.conv_width;
  const double ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden(), F = c.mlp_hidden;
  LayerFlops f;
  f.in_proj = 2 * 2 * D * R;
  f.conv = 2 * 2 * W * C;
  f.scan = 2 * hs * 4 * P * N;
  f.gated_norm = 2 * 8 * di;
  f.out_proj = 2 * di * D;
  f.qkv_lr = 2 * D * (3 * D + 3 * ht);
  f.ttt_update = ht * 6 * 2 * dh * dhh;  // G, U, dH and dw0, dw1, dw2
  f.ttt_apply = ht * 3 * 2 * dh * dhh;
  f.o_proj = 2 * D * D;
  f.mlp = 3 * 2 * D * F;
  f.norms = 2 * 4 * D;
  return f;
}

// One Newton-Schulz step count `steps` on an r x k matrix (r <= k).
inline double NewtonSchulzFlops(double r, double k, int steps) {
  return steps * (2 * r * r * k + 2 * r * r * r + 2 * r * r * k);
}

}  // namespace lact::bench

#endif  // LACT_BENCH_FLOPS_H_
