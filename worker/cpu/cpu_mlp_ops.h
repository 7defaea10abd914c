// The MLP part of the CPU ops (cpu_ops.h): a tile's block output (x +=
// acc), then the SwiGLU MLP of the normed residual added to x. A tile's
// rows are split into one slice per thread (cpu::ForRowSlices), each
// slice's GEMMs on its own core. Where activations are made as bf16 the
// normed input and hidden rows are made as bf16, which the down projection
// reads; otherwise they are float32, rounded in the bf16 mode.
#ifndef LACT_WORKER_CPU_CPU_MLP_OPS_H_
#define LACT_WORKER_CPU_CPU_MLP_OPS_H_

#include <cstdint>
#include <vector>

#include "worker/cpu/cpu_precision.h"
#include "worker/schedule/backend_ops.h"

namespace lact {

class CpuMlpOps {
 public:
  // All outlive the ops.
  CpuMlpOps(const ModelConfig& c, const CpuPrecision& precision, CpuActivations& rows)
      : c_(c), precision_(precision), rows_(rows) {}

  // BackendOps::ResidualMlp.
  void Residual(const LayerWeights& w, int64_t first, int64_t n);

 private:
  // One thread's scratch for its slice of a tile's rows.
  struct Slice {
    std::vector<float> normed, gate, up;
    std::vector<uint16_t> normed16, hidden16;  // as bf16, where made so
  };

  void Rows(const LayerWeights& w, int64_t first, int64_t n, Slice* s);
  // gate and up of the normed rows of x (rows of width D).
  void GateUp(const LayerWeights& w, const float* x, int64_t n, Slice* s);
  // x += SiLU(gate) * up @ mlp_down^T.
  void Down(const LayerWeights& w, float* x, int64_t n, Slice* s);

  const ModelConfig& c_;
  const CpuPrecision& precision_;
  CpuActivations& rows_;
  std::vector<Slice> slices_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_MLP_OPS_H_
