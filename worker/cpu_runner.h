// Runs the model of SPEC.md on one whole sequence on the CPU (float32,
// OpenBLAS + OpenMP), tiled over tokens so that working memory beyond three
// [L, D] activation buffers stays at a few tiles.
//
// RunContext() runs a context and produces the fused state; RunQuery() runs
// a query set against a fused state (SPEC section 3: the forward Mamba
// direction continues from the context's state, LaCT applies the final fast
// weights). Inputs are validated (shape, width, non-empty, finite) and bad
// ones return INVALID_ARGUMENT naming the problem. A runner may be reused for
// many sequences but not from two threads at once.
#ifndef LACT_WORKER_CPU_RUNNER_H_
#define LACT_WORKER_CPU_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"

namespace lact {

struct RunOptions {
  int threads = 0;             // 0: all cores
  int64_t tile_tokens = 4096;  // tokens per tile
  // Called after each layer with (layers done, layers in all).
  std::function<void(int, int)> on_layer_done;
};

class CpuRunner {
 public:
  // `config` is the model's config with the job's overrides applied; only
  // ttt.muon_steps and ttt.chunk_tokens may differ from model.config().
  CpuRunner(const Model& model, const ModelConfig& config, RunOptions options);

  // context: [L, d_input or D], consumed. Returns [L, d_output or D] and
  // fills *state.
  absl::StatusOr<Tensor> RunContext(Tensor context, FusedState* state);

  // query: [L_q, d_input or D]. `state` as produced by RunContext.
  absl::StatusOr<Tensor> RunQuery(Tensor query, const FusedState& state);

 private:
  absl::Status ValidateTokens(const Tensor& tokens, const std::string& what) const;
  absl::StatusOr<Tensor> Run(Tensor tokens, bool is_context, FusedState* state);

  const Model& model_;
  ModelConfig config_;
  RunOptions options_;
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_RUNNER_H_
