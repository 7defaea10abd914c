// The CPU backend as the worker sees it (worker/schedule/backend.h): a
// CpuRunner whose group meets over Gloo. It computes in fp32, or in bf16
// (CpuBf16Mode says how); what it cannot do (tf32x3 scans, NCCL) is
// refused rather than ignored.
#ifndef LACT_WORKER_CPU_CPU_BACKEND_H_
#define LACT_WORKER_CPU_CPU_BACKEND_H_

#include "worker/schedule/backend.h"

namespace lact {

Backend CpuBackend();

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_BACKEND_H_
