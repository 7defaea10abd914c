#include "common/model.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace lact {
namespace {

const char* kDirNames[2] = {"fwd", "bwd"};

std::string LayerName(int layer, const std::string& name) {
  return absl::StrCat("layers.", layer, ".", name);
}

}  // namespace

TensorShapes ExpectedTensors(const ModelConfig& c) {
  const int64_t D = c.d_model, di = c.d_inner(), hs = c.ssm_heads();
  const int64_t ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden(), F = c.mlp_hidden;
  TensorShapes out;
  for (int i = 0; i < c.n_layers; ++i) {
    const auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      out.emplace_back(LayerName(i, name), std::move(shape));
    };
    add("norm1.weight", {D});
    add("norm2.weight", {D});
    for (const char* dir : kDirNames) {
      const std::string p = absl::StrCat("mamba.", dir, ".");
      add(p + "in_proj.weight", {c.in_proj_rows(), D});
      add(p + "conv1d.weight", {c.conv_channels(), c.ssm.conv_width});
      add(p + "conv1d.bias", {c.conv_channels()});
      add(p + "dt_bias", {hs});
      add(p + "A_log", {hs});
      add(p + "D", {hs});
      add(p + "norm.weight", {di});
    }
    add("mamba.out_proj.weight", {D, di});
    add("ttt.qkv.weight", {3 * D, D});
    add("ttt.lr.weight", {3 * ht, D});
    add("ttt.lr.bias", {3 * ht});
    add("ttt.w0", {ht, dhh, dh});
    add("ttt.w1", {ht, dh, dhh});
    add("ttt.w2", {ht, dhh, dh});
    add("ttt.o_norm.weight", {dh});
    add("ttt.o_proj.weight", {D, D});
    add("mlp.gate.weight", {F, D});
    add("mlp.up.weight", {F, D});
    add("mlp.down.weight", {D, F});
  }
  out.emplace_back("final_norm.weight", std::vector<int64_t>{D});
  if (c.d_input > 0) out.emplace_back("embed.weight", std::vector<int64_t>{D, c.d_input});
  if (c.d_output > 0) out.emplace_back("head.weight", std::vector<int64_t>{c.d_output, D});
  return out;
}

absl::StatusOr<Model> Model::FromTensors(const ModelConfig& config,
                                         std::map<std::string, Tensor> tensors) {
  LACT_RETURN_IF_ERROR(ValidateModelConfig(config));
  std::set<std::string> expected_names;
  for (const auto& [name, shape] : ExpectedTensors(config)) {
    expected_names.insert(name);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: missing tensor '", name, "' (shape ", ShapeString(shape), ")"));
    }
    if (it->second.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("model: tensor '", name, "' has shape ",
                                                     ShapeString(it->second.shape), ", expected ",
                                                     ShapeString(shape)));
    }
  }
  for (const auto& [name, t] : tensors) {
    if (!expected_names.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: unexpected tensor '", name, "' (not part of this config)"));
    }
  }
  Model m;
  m.config_ = config;
  m.tensors_ = std::move(tensors);
  m.BindViews();
  return m;
}

void Model::BindViews() {
  layers_.resize(config_.n_layers);
  for (int i = 0; i < config_.n_layers; ++i) {
    LayerWeights& l = layers_[i];
    const auto get = [&](const std::string& name) { return Get(LayerName(i, name)); };
    l.norm1 = get("norm1.weight");
    l.norm2 = get("norm2.weight");
    for (int d = 0; d < 2; ++d) {
      const std::string p = absl::StrCat("mamba.", kDirNames[d], ".");
      l.mamba[d] = {get(p + "in_proj.weight"), get(p + "conv1d.weight"), get(p + "conv1d.bias"),
                    get(p + "dt_bias"),        get(p + "A_log"),         get(p + "D"),
                    get(p + "norm.weight")};
    }
    l.out_proj = get("mamba.out_proj.weight");
    l.qkv = get("ttt.qkv.weight");
    l.lr_w = get("ttt.lr.weight");
    l.lr_b = get("ttt.lr.bias");
    l.w0 = get("ttt.w0");
    l.w1 = get("ttt.w1");
    l.w2 = get("ttt.w2");
    l.o_norm = get("ttt.o_norm.weight");
    l.o_proj = get("ttt.o_proj.weight");
    l.mlp_gate = get("mlp.gate.weight");
    l.mlp_up = get("mlp.up.weight");
    l.mlp_down = get("mlp.down.weight");
  }
  final_norm_ = Get("final_norm.weight");
  embed_ = config_.d_input > 0 ? Get("embed.weight") : nullptr;
  head_ = config_.d_output > 0 ? Get("head.weight") : nullptr;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.size();
  return n;
}

absl::StatusOr<Model> LoadModel(const std::string& path) {
  LACT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  auto it = file.metadata().find("lact.config");
  if (it == file.metadata().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", path, "': no __metadata__[\"lact.config\"] with the model config"));
  }
  absl::StatusOr<ModelConfig> config = ParseModelConfig(it->second);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", path, "': ", config.status().message()));
  }
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, entry] : file.entries()) {
    LACT_ASSIGN_OR_RETURN(tensors[name], file.ReadFloat(name));
  }
  absl::StatusOr<Model> model = Model::FromTensors(*config, std::move(tensors));
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", path, "': ", model.status().message()));
  }
  return model;
}

std::string ModelKey(const std::string& model) {
  if (!absl::StartsWith(model, "preset:")) return model;
  std::vector<std::string> parts = absl::StrSplit(model, ':');
  return absl::StrCat("preset:", parts.size() > 1 ? parts[1] : "");
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& preset) {
  ModelConfig c;  // defaults are the `small` preset of docs/model.md
  if (preset == "small") return c;
  if (preset == "base") {
    c.d_model = 768;
    c.n_layers = 12;
    c.ssm.d_state = 128;
    c.ttt.head_dim = 768;
    c.mlp_hidden = 3072;
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", preset, "' (allowed: small, base)"));
}

namespace {

// Fills a tensor named `name` by `init(rng, index)`; each tensor has its own
// stream so adding a tensor never changes the others.
Tensor Fill(const std::vector<int64_t>& shape, uint64_t seed, const std::string& name,
            const std::function<float(Random&)>& init) {
  uint64_t h = seed * 0x9e3779b97f4a7c15ull + 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  Random rng(h);
  Tensor t(shape);
  for (float& v : t.data) v = init(rng);
  return t;
}

std::function<float(Random&)> InitFor(const std::string& name, const std::vector<int64_t>& shape,
                                      const ModelConfig& c) {
  const auto normal = [](double std) {
    return [std](Random& r) { return static_cast<float>(r.Normal() * std); };
  };
  const auto constant = [](float v) { return [v](Random&) { return v; }; };
  const auto ends = [&](const char* suffix) { return absl::EndsWith(name, suffix); };
  if (ends("norm1.weight") || ends("norm2.weight") || ends("norm.weight")) return constant(1.0f);
  if (ends(".D")) return constant(1.0f);
  if (ends("A_log"))
    return [](Random& r) { return static_cast<float>(std::log(1.0 + 15.0 * r.Uniform())); };
  if (ends("dt_bias")) {
    return [](Random& r) {  // dt log-uniform in [1e-3, 1e-1], stored as inv_softplus(dt)
      const double dt = std::exp(std::log(1e-3) + r.Uniform() * (std::log(1e-1) - std::log(1e-3)));
      return static_cast<float>(dt + std::log(-std::expm1(-dt)));
    };
  }
  if (ends("conv1d.bias")) return normal(0.02);
  if (ends("conv1d.weight")) return normal(1.0 / std::sqrt(static_cast<double>(c.ssm.conv_width)));
  if (ends("lr.weight")) return normal(0.02);
  if (ends("lr.bias")) return constant(0.0f);
  const double fan_in = static_cast<double>(shape.back());
  const double residual_scale = 1.0 / std::sqrt(2.0 * c.n_layers);
  if (ends("out_proj.weight") || ends("o_proj.weight") || ends("down.weight")) {
    return normal(residual_scale / std::sqrt(fan_in));
  }
  return normal(1.0 / std::sqrt(fan_in));
}

}  // namespace

absl::StatusOr<Model> MakePresetModel(const std::string& preset, uint64_t seed) {
  LACT_ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
  return MakeRandomModel(config, seed);
}

absl::StatusOr<Model> MakeRandomModel(const ModelConfig& config, uint64_t seed) {
  LACT_RETURN_IF_ERROR(ValidateModelConfig(config));
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, shape] : ExpectedTensors(config)) {
    tensors[name] = Fill(shape, seed, name, InitFor(name, shape, config));
  }
  return Model::FromTensors(config, std::move(tensors));
}

absl::Status CheckModelName(const std::string& model) {
  if (!absl::StartsWith(model, "preset:")) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(model, ':');
  uint64_t seed = 0;
  if (parts.size() > 3 ||
      (parts.size() == 3 &&
       (parts[2].empty() || !std::isdigit(static_cast<unsigned char>(parts[2][0])) ||
        !absl::SimpleAtoi(parts[2], &seed)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.substr(0, 200),
                     "': expected preset:NAME[:SEED] with SEED an unsigned integer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Model> ResolveModel(const std::string& spec) {
  if (!absl::StartsWith(spec, "preset:")) return LoadModel(spec);
  LACT_RETURN_IF_ERROR(CheckModelName(spec));
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  uint64_t seed = 0;
  if (parts.size() == 3) (void)absl::SimpleAtoi(parts[2], &seed);
  return MakePresetModel(parts[1], seed);
}

}  // namespace lact
