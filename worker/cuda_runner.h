// Runs the model of SPEC.md on one NVIDIA GPU (fp32, TF32 off, for parity
// with the float64 reference): the CUDA counterpart of CpuRunner for a
// single rank. Weights are uploaded once at Create(); a whole sequence is
// processed on the device at once (no tiling yet). Query sets and state work
// as in CpuRunner. Not thread-safe.
#ifndef LACT_WORKER_CUDA_RUNNER_H_
#define LACT_WORKER_CUDA_RUNNER_H_

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/tensor.h"
#include "kernels/cuda/device.h"

namespace lact {

class CudaRunner {
 public:
  // FAILED_PRECONDITION when there is no such device.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(const Model& model, const ModelConfig& config,
                                                            int device = 0);

  absl::StatusOr<Tensor> RunContext(const Tensor& context, FusedState* state);
  absl::StatusOr<Tensor> RunQuery(const Tensor& query, const FusedState& state);

 private:
  struct Buffers;
  CudaRunner(const Model& model, const ModelConfig& config) : model_(model), config_(config) {}
  absl::Status UploadWeights();
  const float* Device(const float* host) const { return device_of_.at(host); }
  absl::StatusOr<Tensor> Run(const Tensor& tokens, bool is_context, FusedState* state);
  absl::Status BiMamba(int layer, bool is_context, Buffers& b, LayerState* state);
  absl::Status Lact(int layer, bool is_context, Buffers& b, LayerState* state);
  absl::Status Mlp(int layer, Buffers& b);

  const Model& model_;
  ModelConfig config_;
  std::unique_ptr<cuda::CudaContext> ctx_;
  std::map<const float*, cuda::DeviceBuffer> weights_;  // by host pointer
  std::map<const float*, const float*> device_of_;
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_RUNNER_H_
