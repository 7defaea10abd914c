// The BiMamba half of a block (docs/model.md, BiMamba) over this rank's shard:
// acc = (Mixer_fwd(h) + reverse(Mixer_bwd(reverse(h)))) @ out_proj^T.
//
// Each direction scans its tiles in scan order (the backward direction
// right to left, reading each tile reversed). In a group of P > 1 ranks:
//   1. every shard's last W-1 conv inputs of each direction are all-gathered
//      and composed into each shard's halo (shards shorter than W-1 pass on
//      older rows);
//   2. each rank gets each direction's summary of its shard (decay product,
//      state reached from zero): the rank first in that direction's scan
//      order has a zero carry-in, so it runs its real scan now and the
//      summary falls out of it; the last needs none (no carry-in reads it);
//      those between run a state-only pre-pass. The summaries are
//      all-gathered and composed into carry-in states;
//   3. the remaining scans run from their carry-in exactly as on one rank;
//   4. the rank last in each direction's scan order reached its final SSM
//      state in its real scan: all-gathered, so the state written (context
//      only) is the same on every rank.
// With P = 2 no rank runs a pre-pass at all.
// The arithmetic of steps 1 and 2 is in shard_exchange.h.
#ifndef LACT_WORKER_SCHEDULE_BIMAMBA_SCHEDULE_H_
#define LACT_WORKER_SCHEDULE_BIMAMBA_SCHEDULE_H_

#include "absl/status/status.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/shard.h"

namespace lact {

// Adds both directions' outputs to the ops' acc (which BeginBlock zeroed).
// A context writes the final states to out->mamba (`kept` is null); a query
// set's forward direction starts from the context's kept->mamba[kForward]
// (`out` is null).
absl::Status RunBiMamba(const ModelConfig& c, const LayerWeights& w, const ShardContext& shard,
                        BackendOps& ops, const LayerState* kept, LayerState* out);

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_BIMAMBA_SCHEDULE_H_
