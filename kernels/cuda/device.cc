#include "kernels/cuda/device.h"

#include "kernels/cuda/cuda_check.h"

namespace lact::cuda {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t floats) {
  DeviceBuffer b;
  if (floats == 0) return b;
  void* p = nullptr;
  LACT_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, floats * sizeof(float)));
  b.ptr_ = static_cast<float*>(p);
  b.size_ = floats;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = other.ptr_;
    size_ = other.size_;
    other.ptr_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device) {
  if (device < 0 || device >= DeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device, " (", DeviceCount(), " visible)"));
  }
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  auto ctx = std::unique_ptr<CudaContext>(new CudaContext());
  ctx->device_ = device;
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&ctx->cublas_));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(ctx->cublas_, ctx->stream_));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(ctx->cublas_, CUBLAS_PEDANTIC_MATH));  // no TF32
  return ctx;
}

absl::Status CudaContext::Activate() const {
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

CudaContext::~CudaContext() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<DeviceBuffer> CudaContext::Upload(const float* host, size_t floats) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(floats);
  if (!b.ok() || floats == 0) return b;
  LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b->get(), host, floats * sizeof(float), cudaMemcpyHostToDevice, stream_));
  return b;
}

absl::Status CudaContext::Download(const float* device, size_t floats, float* host) {
  if (floats == 0) return absl::OkStatus();
  LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device, floats * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  return Synchronize();
}

absl::Status CudaContext::Synchronize() const {
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status Gemm(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return absl::OkStatus();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                          static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb),
                                          a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
  return absl::OkStatus();
}

absl::Status GemmStridedBatched(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                                int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                                int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), stride_b, a, static_cast<int>(lda),
      stride_a, &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
  return absl::OkStatus();
}

absl::Status Linear(const CudaContext& ctx, const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w,
                    int64_t out, float* y, int64_t ldy, float beta) {
  return Gemm(ctx, false, true, rows, out, in, 1.0f, x, ldx, w, in, beta, y, ldy);
}

}  // namespace lact::cuda
