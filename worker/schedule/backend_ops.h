// The operations the model of docs/model.md is computed with, on one backend (the
// CPU, a GPU), over the activations the backend holds for one sequence or
// one rank's shard of it. The schedule (block_schedule.h) decides what runs
// when and what is exchanged with the other ranks; a backend decides how an
// operation runs: its kernels, fusion, streams and memory.
//
// The activations are three [L, D] matrices, addressed by local row:
//   x, the residual stream;  h, the block's normed input;
//   acc, the sum of the block's mixer outputs.
// Besides them a backend holds one scan state (a direction's SSM state,
// conv history and log decay), one set of fast weights (w0 | w1 | w2) with
// their gradients, and its tile scratch.
//
// A backend may queue work asynchronously (a CUDA stream): it is complete
// when a call that returns host data returns, and at Sync(). Calls that
// take host memory are done with it when they return. Rows given to a tile
// operation are at most tile() and lie in [0, tokens()). One thread at a
// time; errors are statuses (a failed launch, a peer gone in the all-reduce).
#ifndef LACT_WORKER_SCHEDULE_BACKEND_OPS_H_
#define LACT_WORKER_SCHEDULE_BACKEND_OPS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"

namespace lact {

enum class Activation { kResidual, kNormed, kMixed };  // x, h, acc

class BackendOps {
 public:
  virtual ~BackendOps() = default;

  int64_t tokens() const { return tokens_; }
  int64_t tile() const { return tile_; }

  // x = tokens @ embed^T, or the tokens themselves (model without embedding).
  // `tokens` has tokens() rows of the model's input width.
  virtual absl::Status LoadTokens(Tensor tokens) = 0;
  // rmsnorm(x, final_norm) [@ head^T] of rows [first, first + n), once the
  // last block has finished them, into `out` ([n, output width], host
  // memory; written when the call returns).
  virtual absl::Status OutputRows(int64_t first, int64_t n, float* out) = 0;
  // A [tokens(), width] buffer, after LoadTokens, whose rows the last block
  // frees as it goes: a tile's rows may be written once its ResidualMlp has
  // run (the CPU's acc, so that a shard's outputs take no memory of their
  // own). Null (the default): the schedule makes a buffer.
  virtual std::shared_ptr<Tensor> OutputBuffer(int64_t width) { return nullptr; }
  // The [n, D] rows of an activation from `first`, copied to `out`.
  virtual absl::Status ReadRows(Activation a, int64_t first, int64_t n, float* out) = 0;

  // h = rmsnorm(x, norm1); acc = 0.
  virtual absl::Status BeginBlock(const LayerWeights& w) = 0;

  // --- BiMamba (docs/model.md, BiMamba) ---
  // Sets the scan state; log decay starts at zero.
  virtual absl::Status LoadScanState(const MambaState& state) = 0;
  // The scan state now, and (if not null) the log decay summed over the
  // tiles scanned since LoadScanState with `summarize` ([H_s]).
  virtual absl::Status StoreScanState(MambaState* state, float* log_decay) = 0;
  // Direction `dir`'s mixer over rows [first, first + n), taken in that
  // direction's scan order (the backward direction reads them reversed),
  // advancing the scan state. With `outputs`, the mixer's output (back in
  // sequence order) goes into acc's rows @ out_proj^T; else only the state
  // advances. With `summarize`, the log decay accumulates sum dt * A. In a
  // block each direction runs with outputs once over all rows, one after
  // the other in either order; acc is read only after both: a backend may
  // hold the first direction's outputs (in acc's memory) and project the
  // sum of both once, as docs/model.md applies out_proj.
  virtual absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                                 bool outputs, bool summarize) = 0;

  // --- LaCT (docs/model.md, LaCT) ---
  // The fast weights: the layer's initial ones, or a context's final ones.
  virtual absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) = 0;
  virtual absl::Status StoreFastWeights(LayerState* state) = 0;
  virtual absl::Status ZeroGrads() = 0;
  // The gradients += rows [first, first + n)'s contribution.
  virtual absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) = 0;
  // The gradients <- their sum over the shard's group, started behind the
  // work already queued and finished before the next work that reads them;
  // work queued in between overlaps it. At most one in flight; a started
  // all-reduce is always finished. A group of one is never asked.
  virtual absl::Status StartGradAllReduce() = 0;
  virtual absl::Status FinishGradAllReduce() = 0;
  // Muon (Newton-Schulz) on the gradients, the step and the weight norm.
  virtual absl::Status UpdateFastWeights(const LayerWeights& w) = 0;
  // acc's rows [first, first + n) += the fast weights applied to them.
  virtual absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) = 0;

  // x[rows] += acc[rows]; x[rows] += SwiGLU-MLP(rmsnorm(x[rows], norm2)).
  virtual absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) = 0;

  // Waits for all queued work.
  virtual absl::Status Sync() = 0;

 protected:
  // tile is clamped to [1, tokens].
  BackendOps(int64_t tokens, int64_t tile)
      : tokens_(tokens),
        tile_(tile < 1        ? 1
              : tile > tokens ? tokens
                              : tile) {}

 private:
  int64_t tokens_;
  int64_t tile_;
};

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_BACKEND_OPS_H_
