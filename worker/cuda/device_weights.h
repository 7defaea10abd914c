// A model's tensors on one GPU, uploaded once and found by their host
// pointer (LayerWeights point into the host model). In bf16 precision each
// tensor's bf16 rounding is made once too, at upload, so a bf16 GEMM reads
// the weights without rounding them again (kernels/cuda/device.h).
//
// DeviceWeightsCache keeps them for the life of a worker process: one
// upload per model, device and precision, shared by every shard and query
// that runs the model there. Thread-safe; the weights are read-only once
// made.
#ifndef LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_
#define LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_

#include <map>
#include <memory>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/model.h"
#include "kernels/cuda/device.h"

namespace lact {

class DeviceWeights {
 public:
  // Uploads every tensor of `model` on `ctx`'s device, in its precision.
  static absl::StatusOr<std::shared_ptr<const DeviceWeights>> Upload(const Model& model,
                                                                     cuda::CudaContext& ctx);

  // The device copy of a host tensor of the uploaded model.
  const float* operator()(const float* host) const { return device_of_.at(host); }
  // The same tensor as a GEMM input, with its bf16 rounding if it was made.
  cuda::GemmInput Matrix(const float* host) const;
  // Bytes of device memory held.
  size_t bytes() const { return bytes_; }

 private:
  std::map<const float*, cuda::DeviceBuffer> buffers_;
  std::map<const float*, cuda::DeviceBuffer> rounded_;  // bf16 values, two per float
  std::map<const float*, const float*> device_of_;
  size_t bytes_ = 0;
};

class DeviceWeightsCache {
 public:
  // The weights of `model` on `ctx`'s device in its precision, uploaded
  // on first use. An entry lives while its model does (the next Get after
  // the model is gone frees it).
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> Get(
      const std::shared_ptr<const Model>& model, cuda::CudaContext& ctx) ABSL_LOCKS_EXCLUDED(mu_);
  // The number of uploads made (for tests and statistics).
  int uploads() const ABSL_LOCKS_EXCLUDED(mu_);

  // The worker process's cache.
  static DeviceWeightsCache& Process();

 private:
  using Key = std::tuple<const Model*, int, cuda::Precision>;
  struct Entry {
    std::weak_ptr<const Model> model;
    std::shared_ptr<const DeviceWeights> weights;
  };
  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int uploads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_DEVICE_WEIGHTS_H_
