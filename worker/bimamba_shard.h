// The BiMamba half of a block (SPEC.md section 5) over this rank's shard:
// acc = (Mixer_fwd(h) + reverse(Mixer_bwd(reverse(h)))) @ out_proj^T.
//
// Each direction scans its tiles in scan order (the backward direction
// right to left on reversed tiles). In a group of P > 1 ranks:
//   1. every shard's last W-1 conv inputs of each direction are all-gathered
//      and composed into each shard's halo (shards shorter than W-1 pass on
//      older rows);
//   2. each rank gets each direction's summary of its shard (decay product,
//      state reached from zero): the rank first in that direction's scan
//      order has a zero carry-in, so it runs its real scan now and the
//      summary falls out of it; the others run a cheap state-only pre-pass.
//      The summaries are all-gathered and composed into carry-in states;
//   3. the remaining scans run from their carry-in exactly as on one worker.
// With P = 2 no rank runs a pre-pass at all. The state written (context
// only) is composed from all summaries, so it is the same on every rank.
#ifndef LACT_WORKER_BIMAMBA_SHARD_H_
#define LACT_WORKER_BIMAMBA_SHARD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/cpu_block.h"

namespace lact {

// h [L, D]: this shard's normed inputs; acc [L, D] is overwritten.
// Context: state->mamba receives the final states. Query: the forward
// direction starts from state->mamba[kForward], which is left unchanged.
absl::Status RunBiMambaShard(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile,
                             const ShardContext& shard, const Tensor& h, Tensor* acc, LayerState* state);

}  // namespace lact

#endif  // LACT_WORKER_BIMAMBA_SHARD_H_
