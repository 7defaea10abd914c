#include "kernels/cuda/device.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {

absl::StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (allowed: fp32, bf16)"));
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

absl::StatusOr<int> MultiprocessorCount() {
  int device = 0, sms = 0;
  LACT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  LACT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

absl::StatusOr<DeviceMemory> QueryDeviceMemory(int device) {
  if (const cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it, or a later launch's check reads it
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device, ": ", cudaGetErrorString(err)));
  }
  size_t free = 0, total = 0;
  LACT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
  return DeviceMemory{.used_bytes = static_cast<int64_t>(total - free),
                      .total_bytes = static_cast<int64_t>(total)};
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t floats) {
  DeviceBuffer b;
  if (floats == 0) return b;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, floats * sizeof(float));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of GPU memory: ", floats * sizeof(float) >> 20, " MiB asked for, ", free >> 20, " of ",
        total >> 20, " MiB free (a smaller shard or --tile-tokens needs less)"));
  }
  LACT_CUDA_RETURN_IF_ERROR(err);
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

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device, Precision precision) {
  if (device < 0 || device >= DeviceCount()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device, " (", DeviceCount(), " visible)"));
  }
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  auto ctx = std::unique_ptr<CudaContext>(new CudaContext());
  ctx->device_ = device;
  ctx->precision_ = precision;
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&ctx->cublas_));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(ctx->cublas_, ctx->stream_));
  // fp32: no TF32 anywhere. bf16: the default math mode, whose fp32 GEMMs
  // (forced ones) are true fp32 too, and whose bf16 GEMMs use tensor cores.
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
      ctx->cublas_, precision == Precision::kFp32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
  return ctx;
}

absl::StatusOr<void*> CudaContext::Scratch(int slot, size_t bytes) const {
  DeviceBuffer& b = scratch_[slot];
  const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  if (b.size() < floats) {
    // The old buffer may still be read by queued work: free it only after that.
    LACT_RETURN_IF_ERROR(Synchronize());
    b = DeviceBuffer();
    LACT_ASSIGN_OR_RETURN(b, DeviceBuffer::Allocate(floats));
  }
  return static_cast<void*>(b.get());
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
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(b->get(), host, floats * sizeof(float), cudaMemcpyHostToDevice, stream_));
  return b;
}

absl::Status CudaContext::Download(const float* device, size_t floats, float* host) {
  if (floats == 0) return absl::OkStatus();
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, device, floats * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  return Synchronize();
}

absl::Status CudaContext::Synchronize() const {
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

namespace {

// One operand of a (batched) row-major GEMM: `rows` x `cols` stored with row
// stride `ld`, `batch` of them `stride` floats apart.
struct Operand {
  GemmInput data;
  int64_t rows, cols, ld, stride, batch;

  // Floats from data[0] to the last one the GEMM reads.
  int64_t Extent() const { return (batch - 1) * stride + (rows - 1) * ld + cols; }
};

// The operand rounded to bf16: as it was made ahead, or in the context's
// scratch `slot`, laid out as the original (gaps between rows are
// converted too and never read).
absl::StatusOr<const __nv_bfloat16*> ToBf16(const CudaContext& ctx, int slot, const Operand& op) {
  if (op.data.bf16 != nullptr) return op.data.bf16;
  const int64_t n = op.Extent();
  LACT_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch(slot, n * sizeof(__nv_bfloat16)));
  auto* out = static_cast<__nv_bfloat16*>(scratch);
  LACT_RETURN_IF_ERROR(RoundToBf16(ctx.stream(), op.data.f32, n, out));
  return out;
}

// Bytes of an operand's values (a batch of one matrix, stride 0, counts once).
int64_t ValueBytes(int64_t rows, int64_t cols, int64_t stride, int64_t batch, int64_t size) {
  return rows * cols * (stride == 0 ? 1 : batch) * size;
}

// Notes a GEMM of `size`-byte operands and a `c_size`-byte output with
// traffic.h.
void NoteGemm(const char* family, int64_t m, int64_t n, int64_t k, int64_t stride_a,
              int64_t stride_b, float beta, int64_t batch, int64_t size, int64_t c_size) {
  const int64_t c = m * n * batch * c_size;
  NoteLaunch(family,
             ValueBytes(m, k, stride_a, batch, size) + ValueBytes(k, n, stride_b, batch, size) +
                 (beta != 0.0f ? c : 0),
             c);
}

absl::Status CheckDims(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                       int64_t batch) {
  constexpr int64_t kMax = 2147483647;
  if (m > kMax || n > kMax || k > kMax || lda > kMax || ldb > kMax || ldc > kMax || batch > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM dimensions beyond cuBLAS's 32-bit range: m=", m, " n=", n, " k=", k,
                     " batch=", batch));
  }
  return absl::OkStatus();
}

}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
// gets (B, A) with m and n swapped.
absl::Status GemmStridedBatched(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m,
                                int64_t n, int64_t k, float alpha, GemmInput a, int64_t lda,
                                int64_t stride_a, GemmInput b, int64_t ldb, int64_t stride_b,
                                float beta, Values c, int64_t ldc, int64_t stride_c, int64_t batch,
                                bool fp32) {
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
  LACT_RETURN_IF_ERROR(CheckDims(m, n, k, lda, ldb, ldc, batch));
  const bool true_fp32 = fp32 || ctx.precision() == Precision::kFp32 || k == 0;
  if (true_fp32 && (c.f32 == nullptr || (k > 0 && (a.f32 == nullptr || b.f32 == nullptr)))) {
    return absl::InvalidArgumentError(
        "a float32 GEMM needs float32 inputs and output; bf16 ones are for bf16 precision");
  }
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ilda = static_cast<int>(lda), ildb = static_cast<int>(ldb),
            ildc = static_cast<int>(ldc);
  const int ibatch = static_cast<int>(batch);
  if (true_fp32) {
    if (batch == 1) {
      LACT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(ctx.cublas(), op_b, op_a, in, im, ik, &alpha, b.f32,
                                              ildb, a.f32, ilda, &beta, c.f32, ildc));
    } else {
      LACT_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
          ctx.cublas(), op_b, op_a, in, im, ik, &alpha, b.f32, ildb, stride_b, a.f32, ilda,
          stride_a, &beta, c.f32, ildc, stride_c, ibatch));
    }
    NoteGemm("GEMM fp32", m, n, k, stride_a, stride_b, beta, batch, 4, 4);
    return absl::OkStatus();
  }
  const Operand opa{a, trans_a ? k : m, trans_a ? m : k, lda, stride_a, batch};
  const Operand opb{b, trans_b ? n : k, trans_b ? k : n, ldb, stride_b, batch};
  LACT_ASSIGN_OR_RETURN(const __nv_bfloat16* a16, ToBf16(ctx, 0, opa));
  LACT_ASSIGN_OR_RETURN(const __nv_bfloat16* b16, ToBf16(ctx, 1, opb));
  void* const c_ptr = c.is_bf16() ? static_cast<void*>(c.bf16) : static_cast<void*>(c.f32);
  const cudaDataType c_type = c.is_bf16() ? CUDA_R_16BF : CUDA_R_32F;
  if (batch == 1) {
    LACT_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        ctx.cublas(), op_b, op_a, in, im, ik, &alpha, b16, CUDA_R_16BF, ildb, a16, CUDA_R_16BF,
        ilda, &beta, c_ptr, c_type, ildc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    LACT_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
        ctx.cublas(), op_b, op_a, in, im, ik, &alpha, b16, CUDA_R_16BF, ildb, stride_b, a16,
        CUDA_R_16BF, ilda, stride_a, &beta, c_ptr, c_type, ildc, stride_c, ibatch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  NoteGemm("GEMM bf16", m, n, k, stride_a, stride_b, beta, batch, 2, c.element_bytes());
  return absl::OkStatus();
}

absl::Status Gemm(const CudaContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, GemmInput a, int64_t lda, GemmInput b, int64_t ldb,
                  float beta, Values c, int64_t ldc, bool fp32) {
  return GemmStridedBatched(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c,
                            ldc, 0, 1, fp32);
}

absl::Status Linear(const CudaContext& ctx, GemmInput x, int64_t ldx, int64_t rows, int64_t in,
                    GemmInput w, int64_t out, Values y, int64_t ldy, float beta) {
  return Gemm(ctx, false, true, rows, out, in, 1.0f, x, ldx, w, in, beta, y, ldy);
}

}  // namespace lact::cuda
