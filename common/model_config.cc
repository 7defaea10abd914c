#include "common/model_config.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace lact {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("model config: ", what));
}

absl::Status CheckKeys(const json& obj, const std::string& where,
                       const std::set<std::string>& allowed,
                       const std::set<std::string>& optional = {}) {
  if (!obj.is_object()) return Bad(absl::StrCat("'", where, "' must be an object"));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!allowed.count(it.key()) && !optional.count(it.key())) {
      return Bad(absl::StrCat("unknown field '", where.empty() ? "" : where + ".", it.key(), "'"));
    }
  }
  for (const std::string& key : allowed) {
    if (!obj.contains(key))
      return Bad(absl::StrCat("missing field '", where.empty() ? "" : where + ".", key, "'"));
  }
  return absl::OkStatus();
}

absl::Status GetInt(const json& obj, const std::string& where, const std::string& key, int min,
                    int* out) {
  const json& v = obj[key];
  const std::string name = where.empty() ? key : where + "." + key;
  if (!v.is_number_integer())
    return Bad(absl::StrCat("'", name, "' must be an integer, got ", v.dump()));
  const int64_t x = v.get<int64_t>();
  if (x < min || x > (1 << 30)) return Bad(absl::StrCat("'", name, "' = ", x, " must be >= ", min));
  *out = static_cast<int>(x);
  return absl::OkStatus();
}

// The optional update-rule fields of `ttt` (model_config.h, TttConfig).
absl::Status GetUpdateRule(const json& ttt, TttConfig* c) {
  if (ttt.contains("normalize_update")) {
    if (!ttt["normalize_update"].is_boolean()) {
      return Bad(absl::StrCat("'ttt.normalize_update' must be true or false, got ",
                              ttt["normalize_update"].dump()));
    }
    c->normalize_update = ttt["normalize_update"].get<bool>();
  }
  if (ttt.contains("ns_precision")) {
    const json& v = ttt["ns_precision"];
    if (v != "float32" && v != "bf16") {
      return Bad(
          absl::StrCat("'ttt.ns_precision' = ", v.dump(), " (allowed: \"float32\", \"bf16\")"));
    }
    c->ns_bf16 = v == "bf16";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.d_model < 1 || c.n_layers < 1 || c.d_input < 0 || c.d_output < 0 || c.mlp_hidden < 1) {
    return Bad("d_model, n_layers and mlp.hidden must be >= 1; d_input, d_output >= 0");
  }
  if (c.ssm.expand < 1 || c.ssm.head_dim < 1 || c.ssm.d_state < 1 || c.ssm.conv_width < 1) {
    return Bad("ssm.expand, ssm.head_dim, ssm.d_state and ssm.conv_width must be >= 1");
  }
  if (c.d_inner() % c.ssm.head_dim != 0) {
    return Bad(absl::StrCat("ssm.head_dim ", c.ssm.head_dim,
                            " must divide d_inner = expand * d_model = ", c.d_inner()));
  }
  if (c.ttt.head_dim < 1 || c.d_model % c.ttt.head_dim != 0) {
    return Bad(absl::StrCat("ttt.head_dim ", c.ttt.head_dim, " must divide d_model ", c.d_model));
  }
  if (c.ttt.inter_multi < 1) return Bad("ttt.inter_multi must be >= 1");
  if (!(c.ttt.base_lr > 0.0) || !(c.ttt.base_lr < 1e6)) {
    return Bad(absl::StrCat("ttt.base_lr ", c.ttt.base_lr, " must be a positive finite number"));
  }
  if (c.ttt.muon_steps < 0 || c.ttt.chunk_tokens < 0)
    return Bad("ttt.muon_steps and ttt.chunk_tokens must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad("not valid JSON");
  ModelConfig c;
  LACT_RETURN_IF_ERROR(
      CheckKeys(root, "", {"d_model", "n_layers", "d_input", "d_output", "ssm", "ttt", "mlp"}));
  LACT_RETURN_IF_ERROR(GetInt(root, "", "d_model", 1, &c.d_model));
  LACT_RETURN_IF_ERROR(GetInt(root, "", "n_layers", 1, &c.n_layers));
  LACT_RETURN_IF_ERROR(GetInt(root, "", "d_input", 0, &c.d_input));
  LACT_RETURN_IF_ERROR(GetInt(root, "", "d_output", 0, &c.d_output));
  const json& ssm = root["ssm"];
  LACT_RETURN_IF_ERROR(CheckKeys(ssm, "ssm", {"expand", "head_dim", "d_state", "conv_width"}));
  LACT_RETURN_IF_ERROR(GetInt(ssm, "ssm", "expand", 1, &c.ssm.expand));
  LACT_RETURN_IF_ERROR(GetInt(ssm, "ssm", "head_dim", 1, &c.ssm.head_dim));
  LACT_RETURN_IF_ERROR(GetInt(ssm, "ssm", "d_state", 1, &c.ssm.d_state));
  LACT_RETURN_IF_ERROR(GetInt(ssm, "ssm", "conv_width", 1, &c.ssm.conv_width));
  const json& ttt = root["ttt"];
  LACT_RETURN_IF_ERROR(
      CheckKeys(ttt, "ttt", {"head_dim", "inter_multi", "base_lr", "muon_steps", "chunk_tokens"},
                {"normalize_update", "ns_precision"}));
  LACT_RETURN_IF_ERROR(GetInt(ttt, "ttt", "head_dim", 1, &c.ttt.head_dim));
  LACT_RETURN_IF_ERROR(GetInt(ttt, "ttt", "inter_multi", 1, &c.ttt.inter_multi));
  if (!ttt["base_lr"].is_number()) return Bad("'ttt.base_lr' must be a number");
  c.ttt.base_lr = ttt["base_lr"].get<double>();
  LACT_RETURN_IF_ERROR(GetInt(ttt, "ttt", "muon_steps", 0, &c.ttt.muon_steps));
  LACT_RETURN_IF_ERROR(GetInt(ttt, "ttt", "chunk_tokens", 0, &c.ttt.chunk_tokens));
  LACT_RETURN_IF_ERROR(GetUpdateRule(ttt, &c.ttt));
  const json& mlp = root["mlp"];
  LACT_RETURN_IF_ERROR(CheckKeys(mlp, "mlp", {"hidden"}));
  LACT_RETURN_IF_ERROR(GetInt(mlp, "mlp", "hidden", 1, &c.mlp_hidden));
  LACT_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j = {{"d_model", c.d_model},
            {"n_layers", c.n_layers},
            {"d_input", c.d_input},
            {"d_output", c.d_output},
            {"ssm",
             {{"expand", c.ssm.expand},
              {"head_dim", c.ssm.head_dim},
              {"d_state", c.ssm.d_state},
              {"conv_width", c.ssm.conv_width}}},
            {"ttt",
             {{"head_dim", c.ttt.head_dim},
              {"inter_multi", c.ttt.inter_multi},
              {"base_lr", c.ttt.base_lr},
              {"muon_steps", c.ttt.muon_steps},
              {"chunk_tokens", c.ttt.chunk_tokens}}},
            {"mlp", {{"hidden", c.mlp_hidden}}}};
  if (c.ttt.normalize_update) j["ttt"]["normalize_update"] = true;
  if (c.ttt.ns_bf16) j["ttt"]["ns_precision"] = "bf16";
  return j.dump();
}

absl::StatusOr<ModelConfig> ApplyJobOptions(const ModelConfig& config, const JobOptions& options) {
  ModelConfig c = config;
  if (options.muon_steps) {
    if (*options.muon_steps < 0 || *options.muon_steps > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("muon_steps ", *options.muon_steps, " is out of range (allowed: 0..100)"));
    }
    c.ttt.muon_steps = *options.muon_steps;
  }
  if (options.chunk_tokens) {
    if (*options.chunk_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk_tokens ", *options.chunk_tokens, " must be >= 0 (0 = one chunk of all tokens)"));
    }
    c.ttt.chunk_tokens = *options.chunk_tokens;
  }
  return c;
}

absl::StatusOr<JobOptions> ParseJobOptions(const std::string& json_text) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("job options: not a JSON object");
  }
  JobOptions o;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job options: '", it.key(), "' must be an integer"));
    }
    if (it.key() == "muon_steps")
      o.muon_steps = it.value().get<int>();
    else if (it.key() == "chunk_tokens")
      o.chunk_tokens = it.value().get<int>();
    else {
      return absl::InvalidArgumentError(
          absl::StrCat("job options: unknown field '", it.key(),
                       "' (a job may override only muon_steps and chunk_tokens)"));
    }
  }
  return o;
}

}  // namespace lact
