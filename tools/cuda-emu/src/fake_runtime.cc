#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "emu_counts.h"

namespace {
std::mutex mu;
std::map<const char*, size_t>& Dev() {
  static std::map<const char*, size_t> m;
  return m;
}
std::map<const char*, size_t>& Pinned() {
  static std::map<const char*, size_t> m;
  return m;
}
std::map<const void*, size_t>& SharedLimits() {
  static std::map<const void*, size_t> m;
  return m;
}
thread_local int current_device = -1;
std::atomic<int64_t> kernels{0}, gemms{0}, device_copies{0}, memsets{0};
std::atomic<bool> dry_run{false};
void Die(const char* what) {
  std::fprintf(stderr, "FAKE CUDA VIOLATION: %s\n", what);
  std::abort();
}
}  // namespace

namespace emu {
WorkCounts Counts() { return {kernels.load(), gemms.load(), device_copies.load(), memsets.load()}; }
void ResetCounts() {
  kernels = 0;
  gemms = 0;
  device_copies = 0;
  memsets = 0;
}
void SetDryRun(bool dry) { dry_run = dry; }
bool DryRun() { return dry_run.load(); }
void CountKernel() { ++kernels; }
}  // namespace emu

bool FakeIsDevice(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> l(mu);
  const char* c = static_cast<const char*>(p);
  auto it = Dev().upper_bound(c);
  if (it == Dev().begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}
bool FakeIsHost(const void* p) { return !FakeIsDevice(p, 1); }

void CheckDev(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  if (!FakeIsDevice(p, bytes)) {
    std::fprintf(stderr, "not device memory or out of range (%zu bytes): %s\n", bytes, what);
    std::abort();
  }
}
void CheckCurrent() {
  if (current_device != 0) Die("no current device on this thread");
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  CheckCurrent();
  *p = std::malloc(bytes);
  // poison to catch reads of uninitialized memory as NaN
  float* f = static_cast<float*>(*p);
  for (size_t i = 0; i < bytes / 4; ++i) f[i] = std::nanf("");
  std::lock_guard<std::mutex> l(mu);
  Dev()[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!Dev().erase(static_cast<const char*>(p))) Die("cudaFree of non-device");
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  CheckCurrent();
  *p = std::malloc(bytes);
  std::lock_guard<std::mutex> l(mu);
  Pinned()[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!Pinned().erase(static_cast<const char*>(p))) Die("cudaFreeHost of non-pinned");
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  CheckCurrent();
  if (bytes == 0) return cudaSuccess;
  const bool dd = FakeIsDevice(dst, bytes), sd = FakeIsDevice(src, bytes);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dd || FakeIsDevice(src, 1)) Die("H2D with wrong pointers");
      break;
    case cudaMemcpyDeviceToHost:
      if (!sd || FakeIsDevice(dst, 1)) Die("D2H with wrong pointers");
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dd || !sd) Die("D2D with wrong pointers");
      ++device_copies;
      break;
    default:
      Die("memcpy kind");
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int v, size_t bytes, cudaStream_t) {
  CheckCurrent();
  CheckDev(dst, bytes, "memset");
  ++memsets;
  std::memset(dst, v, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  CheckCurrent();
  *s = reinterpret_cast<cudaStream_t>(new int(0));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  CheckCurrent();
  *e = reinterpret_cast<cudaEvent_t>(new int(0));
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<int*>(e);
  return cudaSuccess;
}
// Streams are synchronous here: recording marks the event, and waiting on
// one (recorded or not, as in CUDA) returns at once.
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  CheckCurrent();
  if (e == nullptr || s == nullptr) Die("cudaEventRecord without an event or a stream");
  *reinterpret_cast<int*>(e) = 1;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  CheckCurrent();
  if (e == nullptr || s == nullptr) Die("cudaStreamWaitEvent without an event or a stream");
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr) Die("cudaEventSynchronize without an event");
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  CheckCurrent();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) return cudaErrorInvalidValue;
  current_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> l(mu);
  SharedLimits()[func] = static_cast<size_t>(value);
  return cudaSuccess;
}
size_t FakeMaxDynamicShared(const void* func) {
  std::lock_guard<std::mutex> l(mu);
  const auto it = SharedLimits().find(func);
  return it == SharedLimits().end() ? 0 : it->second;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = size_t{1} << 37;  // an H200's worth, roughly
  size_t used = 0;
  std::lock_guard<std::mutex> l(mu);
  for (const auto& [p, bytes] : Dev()) used += bytes;
  *free = *total - used;
  return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t) { return "fake error"; }

// ---- cuBLAS ----
cublasStatus_t cublasCreate(cublasHandle_t* h) {
  CheckCurrent();
  *h = reinterpret_cast<cublasHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete reinterpret_cast<int*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "fake cublas error"; }

namespace {
// C's element as float and back (bf16 rounded to nearest even, once).
float Load(float c) { return c; }
float Load(__nv_bfloat16 c) { return __bfloat162float(c); }
void Store(float* c, float v) { *c = v; }
void Store(__nv_bfloat16* c, float v) { *c = __float2bfloat16_rn(v); }

template <typename TA, typename TB, typename TC>
cublasStatus_t GemmImpl(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        float alpha, const TA* A, int lda, long long sa, const TB* B, int ldb,
                        long long sb, float beta, TC* C, int ldc, long long sc, int batch,
                        float (*ca)(TA), float (*cb)(TB)) {
  CheckCurrent();
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, arows) || ldb < std::max(1, brows) || ldc < std::max(1, m)) {
    std::fprintf(stderr, "cublas invalid ld: m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n", m, n, k, lda,
                 ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ++gemms;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  for (int b = 0; b < batch; ++b) {
    const TA* Ab = A + b * sa;
    const TB* Bb = B + b * sb;
    TC* Cb = C + b * sc;
    if (k > 0) {
      CheckDev(Ab, ((size_t)(acols - 1) * lda + arows) * sizeof(TA), "gemm A");
      CheckDev(Bb, ((size_t)(bcols - 1) * ldb + brows) * sizeof(TB), "gemm B");
    }
    CheckDev(Cb, ((size_t)(n - 1) * ldc + m) * sizeof(TC), "gemm C");
    if (emu::DryRun()) continue;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        // FAKE_GEMM_ACC: unset/0 = float64 accumulation; 1 = fp32, ascending k; 2 = fp32,
        // descending k
        static const int acc_mode = [] {
          const char* e = std::getenv("FAKE_GEMM_ACC");
          return e ? std::atoi(e) : 0;
        }();
        double s = 0;
        float sf = 0;
        for (int q = 0; q < k; ++q) {
          const int p = acc_mode == 2 ? k - 1 - q : q;
          const float a = ca(ta == CUBLAS_OP_N ? Ab[i + (size_t)p * lda] : Ab[p + (size_t)i * lda]);
          const float bb =
              cb(tb == CUBLAS_OP_N ? Bb[p + (size_t)j * ldb] : Bb[j + (size_t)p * ldb]);
          if (acc_mode == 0)
            s += (double)a * bb;
          else
            sf = std::fmaf(a, bb, sf);
        }
        if (acc_mode != 0) s = sf;
        TC* c = &Cb[i + (size_t)j * ldc];
        Store(c, beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * Load(*c)));
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
float F32(float x) { return x; }
float BF(__nv_bfloat16 x) { return __bfloat162float(x); }
}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B,
                           int ldb, const float* beta, float* C, int ldc) {
  return GemmImpl<float, float, float>(ta, tb, m, n, k, *alpha, A, lda, 0, B, ldb, 0, *beta, C, ldc,
                                       0, 1, F32, F32);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float* alpha, const float* A,
                                         int lda, long long sa, const float* B, int ldb,
                                         long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  return GemmImpl<float, float, float>(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C,
                                       ldc, sc, batch, F32, F32);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType at,
                                          int lda, long long sa, const void* B, cudaDataType bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (at != CUDA_R_16BF || bt != CUDA_R_16BF || (ct != CUDA_R_32F && ct != CUDA_R_16BF))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto* A16 = static_cast<const __nv_bfloat16*>(A);
  const auto* B16 = static_cast<const __nv_bfloat16*>(B);
  if (ct == CUDA_R_16BF) {
    return GemmImpl(ta, tb, m, n, k, a, A16, lda, sa, B16, ldb, sb, b,
                    static_cast<__nv_bfloat16*>(C), ldc, sc, batch, BF, BF);
  }
  return GemmImpl(ta, tb, m, n, k, a, A16, lda, sa, B16, ldb, sb, b, static_cast<float*>(C), ldc,
                  sc, batch, BF, BF);
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t c,
                            cublasGemmAlgo_t g) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta,
                                    C, ct, ldc, 0, 1, c, g);
}
cudaError_t cudaGetDevice(int* d) {
  CheckCurrent();
  *d = current_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int device) {
  if (a != cudaDevAttrMultiProcessorCount || device != 0) return cudaErrorInvalidValue;
  static const int sms = [] {
    const char* e = std::getenv("EMU_SMS");
    return e ? std::atoi(e) : 132;
  }();
  *v = sms;
  return cudaSuccess;
}
