#include "tests/random_model.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "common/random.h"

namespace lact::testing {

Model RandomTestModel(const ModelConfig& config, uint64_t seed) {
  Model base = MakeRandomModel(config, seed).value();
  std::map<std::string, Tensor> tensors = base.tensors();
  Random rng(seed ^ 0x5eedull);
  for (auto& [name, t] : tensors) {
    const bool scale_like = absl::EndsWith(name, "norm.weight") ||
                            absl::EndsWith(name, "norm1.weight") ||
                            absl::EndsWith(name, "norm2.weight") || absl::EndsWith(name, ".D");
    const bool bias_like = absl::EndsWith(name, "bias");
    for (float& v : t.data) {
      if (scale_like) v = static_cast<float>(1.0 + 0.3 * rng.Normal());
      if (bias_like) v += static_cast<float>(0.1 * rng.Normal());
    }
  }
  return Model::FromTensors(config, std::move(tensors)).value();
}

Tensor RandomTokens(int64_t tokens, int64_t width, uint64_t seed) {
  Tensor t({tokens, width});
  Random rng(seed);
  for (float& v : t.data) v = static_cast<float>(rng.Normal());
  return t;
}

}  // namespace lact::testing
