// The LaCT part of the CPU ops (cpu_ops.h): the layer's fast weights w0,
// w1, w2 (float32 masters, and in the bf16 mode a rounded copy that the
// GEMMs read, with its bf16 copies for the bf16 matmul), their gradients
// accumulated over a chunk's tiles (kernels/cpu/lact_layer.h), all-reduced
// over the shard's group on a thread of its own so that it overlaps the
// compute thread, the update, and the updated weights applied to a tile's
// queries into acc. A tile's rows are split into one slice per thread
// (cpu::ForRowSlices), each slice's GEMMs on its own core; the update's
// slices sum their gradients in slice order.
#ifndef LACT_WORKER_CPU_CPU_LACT_OPS_H_
#define LACT_WORKER_CPU_CPU_LACT_OPS_H_

#include <cstdint>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/lact_layer.h"
#include "worker/collective/collective.h"
#include "worker/cpu/cpu_precision.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/shard.h"

namespace lact {

class CpuLactOps {
 public:
  // `grads` (may be null for a group of one) and the rest outlive the ops.
  CpuLactOps(const ModelConfig& c, CpuPrecision& precision, CpuActivations& rows, Collective* grads,
             OverlapStats* stats);
  ~CpuLactOps();  // waits for an all-reduce in flight

  // BackendOps' LoadFastWeights, StoreFastWeights, ZeroGrads,
  // AccumulateGrads, StartGradAllReduce, FinishGradAllReduce,
  // UpdateFastWeights and ApplyFastWeights.
  void Load(const LayerWeights& w, const LayerState* retained);
  void Store(LayerState* state) const;
  void ZeroGrads();
  void Accumulate(const LayerWeights& w, int64_t first, int64_t n);
  absl::Status StartAllReduce();
  absl::Status FinishAllReduce();
  void Update(const LayerWeights& w);
  void Apply(const LayerWeights& w, int64_t first, int64_t n);

 private:
  // One thread's scratch for its slice of a tile's rows.
  struct Slice {
    std::vector<float> kv, lr, q, o;
    // dw0 | dw1 | dw2 of slices after the first, summed over the tiles
    // since ZeroGrads when grads_live (FoldSliceGrads adds them to grads_).
    std::vector<float> grads;
    bool grads_live = false;
    cpu::LactWorkspace lact;
    NormedScratch normed;
  };

  // Each of w0, w1, w2 (and their gradients) has this many floats.
  int64_t FastSize() const;
  // The fast weights as the GEMMs take them (rounded in the bf16 mode).
  cpu::FastWeightsRef Fast() const;
  // After fast_ changed: its rounded copy, in the bf16 mode.
  void RoundFastWeights();
  cpu::FastGradsRef Grads();
  // One scratch per thread, grown before a parallel region.
  void GrowSlices();
  // Accumulate's and Apply's work on rows [first, first + n).
  void AccumulateRows(const LayerWeights& w, int64_t first, int64_t n, Slice* s,
                      cpu::FastGradsRef grads);
  void ApplyRows(const LayerWeights& w, int64_t first, int64_t n, Slice* s);
  // grads_ += every live slice's partial gradients, which then are not live:
  // before anything reads grads_ (once per chunk, not once per tile).
  void FoldSliceGrads();

  const ModelConfig& c_;
  CpuPrecision& precision_;
  CpuActivations& rows_;
  Collective* grads_collective_;
  OverlapStats* stats_;
  // The fast weights (w0 | w1 | w2) and their gradients.
  std::vector<float> fast_, grads_;
  std::vector<float> fast_bf16_;  // fast_ rounded, in the bf16 mode (its size fixed)
  std::future<absl::Status> reducing_;
  std::vector<Slice> slices_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_LACT_OPS_H_
