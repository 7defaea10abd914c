// The fused state of a job (docs/model.md, The fused state): per layer the adapted fast
// weights and, per Mamba direction, the SSM and conv states. Its tensor
// names are the golden files' (`layers.{i}.ttt.w0`, `layers.{i}.mamba.fwd.ssm_state`, ...).
#ifndef LACT_COMMON_FUSED_STATE_H_
#define LACT_COMMON_FUSED_STATE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"

namespace lact {

struct MambaState {
  Tensor ssm;   // [H_s, P, N]
  Tensor conv;  // [W-1, d_inner + 2N], pre-conv rows in scan order
};

struct LayerState {
  Tensor w0, w1, w2;    // [H_t, d_h, dh], [H_t, dh, d_h], [H_t, d_h, dh]
  MambaState mamba[2];  // indexed by Direction
};

struct FusedState {
  std::vector<LayerState> layers;
};

// A state of zeros (and fast weights left empty) shaped for `config`.
FusedState ZeroFusedState(const ModelConfig& config);

// name -> tensor, borrowing from `state`.
std::map<std::string, const Tensor*> FusedStateTensors(const FusedState& state);

}  // namespace lact

#endif  // LACT_COMMON_FUSED_STATE_H_
