// The BiMamba half of a block (SPEC.md section 5) over this rank's shard:
// acc = (Mixer_fwd(h) + reverse(Mixer_bwd(reverse(h)))) @ out_proj^T.
//
// Each direction scans its tiles in scan order (the backward direction
// right to left on reversed tiles). In a group of P > 1 ranks, before its
// scan each direction all-gathers (1) the boundary conv inputs of every
// shard, composed into this shard's halo, and (2) every shard's scan
// summary from a cheap state-only pre-pass, composed into this shard's
// carry-in state; then the scan runs exactly as on one worker. The state
// written (context only) is composed from all summaries, so it is the same
// on every rank.
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
