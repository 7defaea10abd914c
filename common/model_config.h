// The model configuration of docs/model.md, Configuration, its JSON form (the
// `lact.config` safetensors metadata), and the per-job overrides.
//
// ParseModelConfig() rejects missing, unknown, mistyped and out-of-range
// fields and shapes that do not divide, naming the field.
#ifndef LACT_COMMON_MODEL_CONFIG_H_
#define LACT_COMMON_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace lact {

struct SsmConfig {
  int expand = 2;
  int head_dim = 64;   // P
  int d_state = 64;    // N
  int conv_width = 4;  // W
};

struct TttConfig {
  int head_dim = 128;  // dh
  int inter_multi = 2;
  double base_lr = 0.01;
  int muon_steps = 0;
  int chunk_tokens = 0;  // 0: all context tokens in one chunk
  // Upstream LaCT's update rule (docs/upstream.md); both off by default, and
  // written to JSON only when on. normalize_update: with muon_steps = 0 the
  // update is dw / (||dw||_F + 1e-7) instead of dw. ns_bf16: the
  // normalisation and the Newton-Schulz iteration round every result to bf16
  // ("ns_precision": "bf16"; the default "float32").
  bool normalize_update = false;
  bool ns_bf16 = false;
};

struct ModelConfig {
  int d_model = 256;  // D
  int n_layers = 2;
  int d_input = 0;   // 0: D, no embedding
  int d_output = 0;  // 0: D, no head
  SsmConfig ssm;
  TttConfig ttt;
  int mlp_hidden = 1024;  // F

  // Derived sizes.
  int input_width() const { return d_input > 0 ? d_input : d_model; }
  int output_width() const { return d_output > 0 ? d_output : d_model; }
  int d_inner() const { return ssm.expand * d_model; }
  int ssm_heads() const { return d_inner() / ssm.head_dim; }
  int conv_channels() const { return d_inner() + 2 * ssm.d_state; }
  int in_proj_rows() const { return 2 * d_inner() + 2 * ssm.d_state + ssm_heads(); }
  int ttt_heads() const { return d_model / ttt.head_dim; }
  int fast_hidden() const { return ttt.inter_multi * ttt.head_dim; }  // d_h
};

// The overrides a job may carry (docs/model.md: only these two). Unset = config value.
struct JobOptions {
  std::optional<int> muon_steps;
  std::optional<int> chunk_tokens;
};

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);
std::string ModelConfigToJson(const ModelConfig& config);
absl::Status ValidateModelConfig(const ModelConfig& config);

// Returns config with the job's overrides applied; INVALID_ARGUMENT for
// negative values.
absl::StatusOr<ModelConfig> ApplyJobOptions(const ModelConfig& config, const JobOptions& options);

// Parses the golden files' `job.options` JSON ({} or muon_steps/chunk_tokens).
absl::StatusOr<JobOptions> ParseJobOptions(const std::string& json_text);

}  // namespace lact

#endif  // LACT_COMMON_MODEL_CONFIG_H_
