// One LaCT-BiMamba block (SPEC.md section 4) over a whole sequence held in
// memory, computed tile by tile on the CPU. Internal to the CPU runner.
#ifndef LACT_WORKER_CPU_BLOCK_H_
#define LACT_WORKER_CPU_BLOCK_H_

#include <cstdint>

#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"

namespace lact {

struct BlockBuffers {
  Tensor h;    // [L, D] rmsnorm(x, norm1)
  Tensor acc;  // [L, D] a + t
};

// x [L, D] is updated in place. Context: `state` starts zeroed (fast weights
// are set from the model) and receives this layer's state. Query: `state` is
// the context's and is only read.
void RunBlockCpu(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile, Tensor* x,
                 BlockBuffers* buffers, LayerState* state);

}  // namespace lact

#endif  // LACT_WORKER_CPU_BLOCK_H_
