// The schedule of the model of docs/model.md over one rank's contiguous shard of
// a sequence, the same for every backend: what runs in which order, tile by
// tile, and what is exchanged with the group's other ranks. The backend's
// BackendOps compute; this file and bimamba_schedule.h are the only place
// the distributed algorithm is written.
//
// A block, on every rank in the same order:
//   1. h = rmsnorm(x); the fast weights are loaded (context: the layer's
//      initial ones; query: the context's final ones);
//   2. context: LaCT chunk 0's gradients over the shard's tokens in it, and
//      their all-reduce started;
//   3. the BiMamba (bimamba_schedule.h), overlapping that all-reduce;
//   4. the all-reduce finished; per LaCT chunk k (context; a query is one
//      chunk and no update): the update with the summed gradients, then the
//      updated fast weights applied to the shard's tokens of chunk k, then
//      chunk k+1's gradients and their all-reduce (nothing to overlap with);
//   5. x += acc; x += MLP(rmsnorm(x)), tile by tile; in the last block each
//      tile's output rows are made right after it (RunModel);
//   6. context: the layer's state is stored; it is identical on every rank.
// A group of one makes no exchange. Cancellation is polled between tiles
// and returns CANCELLED.
#ifndef LACT_WORKER_SCHEDULE_BLOCK_SCHEDULE_H_
#define LACT_WORKER_SCHEDULE_BLOCK_SCHEDULE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/shard.h"

namespace lact {

// Work on rows [first, first + n) of a tile.
using TileStep = std::function<absl::Status(int64_t first, int64_t n)>;

// x <- block(x) on `ops`. A context (shard.kind) writes this layer's state
// to `out`, identical on every rank (`kept` is null); a query set (group of
// one) reads the context's from `kept` (`out` is null). `after_tile`, when
// set, runs after each tile's residual MLP, with its rows.
absl::Status RunBlock(const ModelConfig& c, const LayerWeights& w, const ShardContext& shard,
                      BackendOps& ops, const LayerState* kept, LayerState* out,
                      const TileStep& after_tile = nullptr);

// The whole model over the shard's `tokens` (ops.tokens() rows): embedding,
// every block, final norm and head. A context: *out holds zeros of the
// model's shapes and receives the fused state; a query set reads the
// context's fused state `kept`. The output rows are returned whole, or,
// with shard.output_rows, handed to it tile by tile as the last block
// finishes them (an empty tensor is returned). An error names the layer it
// happened in.
absl::StatusOr<Tensor> RunModel(const Model& model, const ModelConfig& c, const ShardContext& shard,
                                Tensor tokens, BackendOps& ops, const FusedState* kept,
                                FusedState* out,
                                const std::function<void(int, int)>& on_layer_done);

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_BLOCK_SCHEDULE_H_
