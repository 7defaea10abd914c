// RAII for the device side of the CUDA backend: a device buffer, and a
// context owning one stream, one cuBLAS handle and the GEMM precision.
//
// Precision: kFp32 runs every GEMM in true fp32 (TF32 off), for
// parity with the float64 reference; kBf16, the production mode, rounds
// both operands of a GEMM to bf16 and accumulates in fp32 (tensor cores);
// everything else (state, norms, scans, the fast-weight update) stays fp32.
// Not thread-safe: one CudaContext per thread of work.
#ifndef LACT_KERNELS_CUDA_DEVICE_H_
#define LACT_KERNELS_CUDA_DEVICE_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/values.h"

namespace lact::cuda {

enum class Precision { kFp32, kBf16 };

// "fp32" or "bf16"; INVALID_ARGUMENT naming the allowed values otherwise.
absl::StatusOr<Precision> ParsePrecision(const std::string& name);
// The name ParsePrecision takes: "fp32" or "bf16".
inline const char* PrecisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

// Number of CUDA devices visible (0 when there is no driver or device).
int DeviceCount();

// The current device's multiprocessor count (what the scans size their
// grids by).
absl::StatusOr<int> MultiprocessorCount();

// Device `device`'s memory in use (by every process on it) and in all;
// makes it this thread's current device.
struct DeviceMemory {
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};
absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // RESOURCE_EXHAUSTED (with the sizes) when the device is out of memory.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t floats);
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), size_(other.size_) {
    other.ptr_ = nullptr;
    other.size_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  float* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  float* ptr_ = nullptr;
  size_t size_ = 0;
};

class CudaContext {
 public:
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(
      int device, Precision precision = Precision::kFp32);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Makes this context's device current for the calling thread.
  absl::Status Activate() const;
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  int device() const { return device_; }
  Precision precision() const { return precision_; }

  // Device scratch of at least `bytes` for the bf16 GEMM operands (slot 0:
  // A, 1: B), grown on demand. Valid until the next call with the same slot.
  absl::StatusOr<void*> Scratch(int slot, size_t bytes) const;

  absl::StatusOr<DeviceBuffer> Upload(const float* host, size_t floats);
  absl::Status Download(const float* device, size_t floats, float* host);
  absl::Status Synchronize() const;

 private:
  CudaContext() = default;
  int device_ = 0;
  Precision precision_ = Precision::kFp32;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  mutable DeviceBuffer scratch_[2];
};

// A GEMM input: its fp32 values and, where they were made ahead (the
// model's weights, once per upload), their bf16 rounding laid out the same
// way, which a bf16 GEMM then reads instead of rounding the input again.
struct GemmInput {
  GemmInput(const float* values) : f32(values) {}  // NOLINT(runtime/explicit)
  GemmInput(const float* values, const __nv_bfloat16* rounded) : f32(values), bf16(rounded) {}
  // A tile's intermediate, float32 or bf16 (values.h).
  GemmInput(const Values& values) : f32(values.f32), bf16(values.bf16) {}  // NOLINT
  // The same input from `floats` values further on.
  GemmInput Offset(int64_t floats) const {
    return {f32 != nullptr ? f32 + floats : nullptr, bf16 != nullptr ? bf16 + floats : nullptr};
  }
  const float* f32;
  const __nv_bfloat16* bf16 = nullptr;
};

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C on the context's
// stream, in the context's precision unless `fp32` forces true fp32 (the
// Newton-Schulz iteration, which bf16 operands would destabilise). C is
// float32, or bf16 (accumulated in float32, rounded once as it is written)
// for a bf16 GEMM; a true-fp32 GEMM needs float32 inputs and output
// (INVALID_ARGUMENT otherwise).
absl::Status Gemm(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, GemmInput a, int64_t lda, GemmInput b, int64_t ldb,
                  float beta, Values c, int64_t ldc, bool fp32 = false);

// The same for `batch` independent problems whose matrices are `stride_*`
// floats apart.
absl::Status GemmStridedBatched(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m,
                                int64_t n, int64_t k, float alpha, GemmInput a, int64_t lda,
                                int64_t stride_a, GemmInput b, int64_t ldb, int64_t stride_b,
                                float beta, Values c, int64_t ldc, int64_t stride_c, int64_t batch,
                                bool fp32 = false);

// y[rows, out] = x[rows, in] @ w[out, in]^T + beta * y.
absl::Status Linear(const CudaContext& ctx, GemmInput x, int64_t ldx, int64_t rows, int64_t in,
                    GemmInput w, int64_t out, Values y, int64_t ldy, float beta = 0.0f);

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_DEVICE_H_
