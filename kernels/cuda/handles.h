// Owners of the raw CUDA handles a collective keeps (streams, events, pinned
// host memory), released when the owner is destroyed or reset, like
// DeviceBuffer owns device memory. Move-only; a moved-from owner is empty.
// Release errors are ignored: a destructor has no one to report them to.
#ifndef LACT_KERNELS_CUDA_HANDLES_H_
#define LACT_KERNELS_CUDA_HANDLES_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace lact::cuda {

template <typename Handle, cudaError_t (*Release)(Handle)>
class Owned {
 public:
  Owned() = default;
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    reset(std::exchange(other.handle_, nullptr));
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  Handle get() const { return handle_; }
  // Where a cuda*Create call writes a new handle (the old one is released).
  Handle* out() {
    reset();
    return &handle_;
  }
  void reset(Handle handle = nullptr) {
    if (handle_ != nullptr) (void)Release(handle_);
    handle_ = handle;
  }

 private:
  Handle handle_ = nullptr;
};

using StreamHandle = Owned<cudaStream_t, cudaStreamDestroy>;
using EventHandle = Owned<cudaEvent_t, cudaEventDestroy>;

// Page-locked host floats (cudaMallocHost), for copies that overlap compute.
class PinnedFloats {
 public:
  // Grows to at least `floats` (the contents are not kept).
  cudaError_t Reserve(size_t floats) {
    if (floats <= capacity_) return cudaSuccess;
    memory_.reset();
    capacity_ = 0;
    const cudaError_t error = cudaMallocHost(memory_.out(), floats * sizeof(float));
    if (error == cudaSuccess) capacity_ = floats;
    return error;
  }
  float* get() const { return static_cast<float*>(memory_.get()); }
  size_t capacity() const { return capacity_; }

 private:
  Owned<void*, cudaFreeHost> memory_;
  size_t capacity_ = 0;
};

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_HANDLES_H_
