// A deliberately naive float64 implementation of docs/model.md, written for
// obviousness, not speed: whole sequences at once, explicit reversal, one
// loop per formula. It is the trivially-correct model that every backend is
// run beside in the parity tests. Single-threaded; O(L) memory per tensor.
#ifndef LACT_KERNELS_REFERENCE_REFERENCE_MODEL_H_
#define LACT_KERNELS_REFERENCE_REFERENCE_MODEL_H_

#include <map>
#include <string>
#include <vector>

#include "common/model.h"
#include "common/tensor.h"

namespace lact::reference {

struct JobOutputs {
  TensorD output;                        // [L, d_out]
  std::vector<TensorD> queries;          // [L_k, d_out] each
  std::map<std::string, TensorD> state;  // docs/model.md, The fused state names
};

struct ReferenceOptions {
  // Round both operands of every matrix product (the linear layers and the
  // LaCT products; not Newton-Schulz) to bf16, as the GPU's bf16 mode does:
  // the baseline that mode's error is measured against.
  bool bf16_operands = false;
  // Also round to bf16 the matrix products the GPU's bf16 mode writes as
  // bf16 for their next reader: in_proj's rows (z, x|B|C, dt), q/k/v, the
  // fast weights' products G, U, Hd (in the update and in the application)
  // and the applied output before its norm, the MLP's gate and up; and,
  // where d_inner <= 2 d_model, project the two BiMamba directions' bf16
  // rows summed (the sum rounded to bf16 again), once. The residual stream, the learning
  // rates, the gradient sums and the state stay unrounded.
  bool bf16_activations = false;
  // Also round the scan's inputs x, B, C (the conv's outputs) and its
  // outputs y (before the gate) to bf16, as the GPU's bf16 scan
  // (--scan-math bf16) reads and writes them.
  bool bf16_scan = false;
};

// Runs a job: `config` is the model's config with the job's overrides
// applied (muon_steps, chunk_tokens); the weights come from `model`.
JobOutputs RunJob(const Model& model, const ModelConfig& config, const Tensor& context,
                  const std::vector<Tensor>& queries, ReferenceOptions options = {});

}  // namespace lact::reference

#endif  // LACT_KERNELS_REFERENCE_REFERENCE_MODEL_H_
