// Error handling for CUDA and cuBLAS calls, NCCL style: the macros return an
// absl::Status naming the call instead of aborting, so a worker survives a
// bad request or a lost device. A failed CUDA call's error is also taken
// off the runtime's last-error slot (as NCCL's checks do), so the next
// launch check does not report it again and blame the wrong kernel; an
// error that poisons the context stays, as CUDA keeps it.
#ifndef LACT_KERNELS_CUDA_CUDA_CHECK_H_
#define LACT_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#define LACT_CUDA_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                          \
    const cudaError_t lact_err_ = (expr);                                                       \
    if (lact_err_ != cudaSuccess) {                                                             \
      (void)cudaGetLastError();                                                                 \
      return ::absl::InternalError(::absl::StrCat(#expr, ": ", cudaGetErrorString(lact_err_))); \
    }                                                                                           \
  } while (0)

#define LACT_CUBLAS_RETURN_IF_ERROR(expr)                                                          \
  do {                                                                                             \
    const cublasStatus_t lact_err_ = (expr);                                                       \
    if (lact_err_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      return ::absl::InternalError(::absl::StrCat(#expr, ": ", cublasGetStatusString(lact_err_))); \
    }                                                                                              \
  } while (0)

#endif  // LACT_KERNELS_CUDA_CUDA_CHECK_H_
