// One LaCT-BiMamba block (SPEC.md section 4) over this rank's contiguous
// shard of a sequence, computed tile by tile on the CPU. Internal to the
// runners.
//
// With a group of more than one rank (contexts only), the block exchanges
// through the collectives, in this order on every rank: the conv halo rows
// and the scan summaries of each direction (ShardContext::sync), and one
// gradient all-reduce per LaCT chunk (ShardContext::grads). The first
// chunk's all-reduce runs on its own thread while the BiMamba scans compute.
// The fused state it produces is identical on every rank.
#ifndef LACT_WORKER_CPU_BLOCK_H_
#define LACT_WORKER_CPU_BLOCK_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "worker/collective.h"

namespace lact {

struct ShardContext {
  Collective* sync = nullptr;   // halos, summaries
  Collective* grads = nullptr;  // LaCT gradient all-reduce, used from a second thread
  int64_t begin = 0;            // global index of this shard's first token
  int64_t total = 0;            // tokens in the whole sequence
  // Polled between tiles; when it returns true the block stops with CANCELLED.
  std::function<bool()> cancelled;

  bool Cancelled() const { return cancelled && cancelled(); }
};

struct BlockBuffers {
  Tensor h;    // [L, D] rmsnorm(x, norm1)
  Tensor acc;  // [L, D] a + t
};

// Time spent in the gradient all-reduce and the part of it the compute
// thread waited for (the rest was hidden behind the BiMamba scans).
struct OverlapStats {
  double allreduce_seconds = 0;
  double waited_seconds = 0;
};

// x [L, D] (this shard) is updated in place. Context: `state` receives this
// layer's state. Query (size-1 group only): `state` is the context's, read.
absl::Status RunBlockCpu(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile,
                         const ShardContext& shard, Tensor* x, BlockBuffers* buffers, LayerState* state,
                         OverlapStats* stats);

}  // namespace lact

#endif  // LACT_WORKER_CPU_BLOCK_H_
