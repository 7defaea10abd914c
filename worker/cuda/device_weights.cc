#include "worker/cuda/device_weights.h"

#include <utility>

#include "common/status_macros.h"

namespace lact {

absl::Status DeviceWeights::Upload(const Model& model, cuda::CudaContext& ctx) {
  for (const auto& [name, t] : model.tensors()) {
    LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, ctx.Upload(t.ptr(), t.size()));
    device_of_[t.ptr()] = b.get();
    buffers_[t.ptr()] = std::move(b);
  }
  return ctx.Synchronize();
}

}  // namespace lact
