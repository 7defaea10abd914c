// Model weights (docs/model.md, Weights) held as float32 host tensors, with typed
// per-layer views for the kernels.
//
// A Model is built only through FromTensors(), LoadModel() or
// MakePresetModel(), which check that exactly the tensors the config asks
// for are present with the right shapes (missing, extra or mis-shaped tensors
// are INVALID_ARGUMENT naming the tensor). Move-only: the views point into the
// owned tensors. Immutable after construction; safe to share across threads.
#ifndef LACT_COMMON_MODEL_H_
#define LACT_COMMON_MODEL_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace lact {

enum Direction { kForward = 0, kBackward = 1 };

struct MambaDirWeights {
  const float* in_proj;  // [2*d_inner + 2N + H_s, D], rows z, x, B, C, dt
  const float* conv_w;   // [d_inner + 2N, W]
  const float* conv_b;   // [d_inner + 2N]
  const float* dt_bias;  // [H_s]
  const float* a_log;    // [H_s]
  const float* d_skip;   // [H_s]
  const float* norm;     // [d_inner]
};

struct LayerWeights {
  const float* norm1;  // [D]
  const float* norm2;  // [D]
  MambaDirWeights mamba[2];
  const float* out_proj;  // [D, d_inner]
  const float* qkv;       // [3D, D]
  const float* lr_w;      // [3 H_t, D]
  const float* lr_b;      // [3 H_t]
  const float* w0;        // [H_t, d_h, dh]
  const float* w1;        // [H_t, dh, d_h]
  const float* w2;        // [H_t, d_h, dh]
  const float* o_norm;    // [dh]
  const float* o_proj;    // [D, D]
  const float* mlp_gate;  // [F, D]
  const float* mlp_up;    // [F, D]
  const float* mlp_down;  // [D, F]
};

using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Every tensor name and shape the config requires, in docs/model.md's order.
TensorShapes ExpectedTensors(const ModelConfig& config);

class Model {
 public:
  static absl::StatusOr<Model> FromTensors(const ModelConfig& config,
                                           std::map<std::string, Tensor> tensors);

  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const LayerWeights& layer(int i) const { return layers_[i]; }
  const float* final_norm() const { return final_norm_; }
  const float* embed() const { return embed_; }  // null when d_input == 0
  const float* head() const { return head_; }    // null when d_output == 0
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  int64_t num_parameters() const;

 private:
  Model() = default;
  const float* Get(const std::string& name) const { return tensors_.at(name).ptr(); }
  void BindViews();

  ModelConfig config_;
  std::map<std::string, Tensor> tensors_;
  std::vector<LayerWeights> layers_;
  const float* final_norm_ = nullptr;
  const float* embed_ = nullptr;
  const float* head_ = nullptr;
};

// Loads a safetensors model (F32, BF16 or F16, upcast) with its config in
// __metadata__["lact.config"].
absl::StatusOr<Model> LoadModel(const std::string& path);

// Random weights for a named preset ("small" or "base"), identical for a
// given seed on every machine.
absl::StatusOr<Model> MakePresetModel(const std::string& preset, uint64_t seed);

// Random weights for any valid config, initialised as the presets are.
absl::StatusOr<Model> MakeRandomModel(const ModelConfig& config, uint64_t seed);

// "preset:NAME[:SEED]" or a path to a .safetensors file.
absl::StatusOr<Model> ResolveModel(const std::string& spec);

// The name under which a model is listed: "preset:small:7" -> "preset:small";
// a file model's name is its own key.
std::string ModelKey(const std::string& model);
// INVALID_ARGUMENT unless a "preset:" name has the form preset:NAME[:SEED]
// with SEED an unsigned integer (a file's name is taken as it is).
absl::Status CheckModelName(const std::string& model);

// The configs of the built-in presets.
absl::StatusOr<ModelConfig> PresetConfig(const std::string& preset);

}  // namespace lact

#endif  // LACT_COMMON_MODEL_H_
