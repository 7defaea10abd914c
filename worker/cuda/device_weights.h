// The model's tensors on one GPU, uploaded once and found by their host
// pointer (LayerWeights point into the host model).
#ifndef LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_
#define LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_

#include <map>

#include "absl/status/status.h"
#include "common/model.h"
#include "kernels/cuda/device.h"

namespace lact {

class DeviceWeights {
 public:
  absl::Status Upload(const Model& model, cuda::CudaContext& ctx);
  // The device copy of a host tensor of the uploaded model.
  const float* operator()(const float* host) const { return device_of_.at(host); }

 private:
  std::map<const float*, cuda::DeviceBuffer> buffers_;
  std::map<const float*, const float*> device_of_;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_
