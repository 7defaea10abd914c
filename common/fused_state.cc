#include "common/fused_state.h"

#include "absl/strings/str_cat.h"

namespace lact {
namespace {

const char* kDirNames[2] = {"fwd", "bwd"};

template <typename State, typename Fn>
void ForEachTensor(State& state, Fn fn) {
  for (size_t i = 0; i < state.layers.size(); ++i) {
    auto& l = state.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    fn(p + "ttt.w0", l.w0);
    fn(p + "ttt.w1", l.w1);
    fn(p + "ttt.w2", l.w2);
    for (int d = 0; d < 2; ++d) {
      fn(absl::StrCat(p, "mamba.", kDirNames[d], ".ssm_state"), l.mamba[d].ssm);
      fn(absl::StrCat(p, "mamba.", kDirNames[d], ".conv_state"), l.mamba[d].conv);
    }
  }
}

}  // namespace

FusedState ZeroFusedState(const ModelConfig& c) {
  FusedState s;
  s.layers.resize(c.n_layers);
  for (LayerState& l : s.layers) {
    for (MambaState& m : l.mamba) {
      m.ssm = Tensor({c.ssm_heads(), c.ssm.head_dim, c.ssm.d_state});
      m.conv = Tensor({c.ssm.conv_width - 1, c.conv_channels()});
    }
    l.w0 = Tensor({c.ttt_heads(), c.fast_hidden(), c.ttt.head_dim});
    l.w1 = Tensor({c.ttt_heads(), c.ttt.head_dim, c.fast_hidden()});
    l.w2 = Tensor({c.ttt_heads(), c.fast_hidden(), c.ttt.head_dim});
  }
  return s;
}

std::map<std::string, const Tensor*> FusedStateTensors(const FusedState& state) {
  std::map<std::string, const Tensor*> out;
  ForEachTensor(state, [&](const std::string& name, const Tensor& t) { out[name] = &t; });
  return out;
}

}  // namespace lact
