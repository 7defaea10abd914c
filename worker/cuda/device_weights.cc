#include "worker/cuda/device_weights.h"

#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/kernels.h"

namespace lact {

absl::StatusOr<std::shared_ptr<const DeviceWeights>> DeviceWeights::Upload(const Model& model,
                                                                           cuda::CudaContext& ctx) {
  auto w = std::make_shared<DeviceWeights>();
  const bool round = ctx.precision() == cuda::Precision::kBf16;
  for (const auto& [name, t] : model.tensors()) {
    LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, ctx.Upload(t.ptr(), t.size()));
    w->bytes_ += b.size() * sizeof(float);
    if (round) {
      LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer r, cuda::DeviceBuffer::Allocate((t.size() + 1) / 2));
      LACT_RETURN_IF_ERROR(cuda::RoundToBf16(ctx.stream(), b.get(), t.size(),
                                             reinterpret_cast<__nv_bfloat16*>(r.get())));
      w->bytes_ += r.size() * sizeof(float);
      w->rounded_[t.ptr()] = std::move(r);
    }
    w->device_of_[t.ptr()] = b.get();
    w->buffers_[t.ptr()] = std::move(b);
  }
  LACT_RETURN_IF_ERROR(ctx.Synchronize());
  return std::shared_ptr<const DeviceWeights>(std::move(w));
}

cuda::GemmInput DeviceWeights::Matrix(const float* host) const {
  auto rounded = rounded_.find(host);
  if (rounded == rounded_.end()) return (*this)(host);
  return {(*this)(host), reinterpret_cast<const __nv_bfloat16*>(rounded->second.get())};
}

absl::StatusOr<std::shared_ptr<const DeviceWeights>> DeviceWeightsCache::Get(
    const std::shared_ptr<const Model>& model, cuda::CudaContext& ctx) {
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = it->second.model.expired() ? entries_.erase(it) : std::next(it);
  }
  const Key key{model.get(), ctx.device(), ctx.precision()};
  auto found = entries_.find(key);
  if (found != entries_.end()) return found->second.weights;
  LACT_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceWeights> weights,
                        DeviceWeights::Upload(*model, ctx));
  ++uploads_;
  entries_[key] = {model, weights};
  return weights;
}

int DeviceWeightsCache::uploads() const {
  absl::MutexLock lock(&mu_);
  return uploads_;
}

DeviceWeightsCache& DeviceWeightsCache::Process() {
  static DeviceWeightsCache* cache = new DeviceWeightsCache();
  return *cache;
}

}  // namespace lact
