// SsdWorkspace (ssd_scan.h): the scratch of the SSD scans, fp32 and bf16.
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ssd_scan.h"

namespace lact::cuda {

absl::StatusOr<float*> SsdWorkspace::Reserve(cudaStream_t s, size_t floats) {
  if (floats > buffer_.size()) {
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    buffer_ = DeviceBuffer();  // free the old buffer before taking the larger one
    LACT_ASSIGN_OR_RETURN(buffer_, DeviceBuffer::Allocate(floats));
  }
  return buffer_.get();
}

}  // namespace lact::cuda
