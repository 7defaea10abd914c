// The CUDA backend as the worker sees it (worker/schedule/backend.h),
// built only with a CUDA toolkit: a CudaRunner on one device, whose group
// is Gloo staged through the host (several workers may share a GPU) or
// NCCL (one GPU per rank).
#ifndef LACT_WORKER_CUDA_CUDA_BACKEND_H_
#define LACT_WORKER_CUDA_CUDA_BACKEND_H_

#include "worker/schedule/backend.h"

namespace lact {

Backend CudaBackend();

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CUDA_BACKEND_H_
