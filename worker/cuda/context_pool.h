// The CUDA contexts of this process (each a stream, a cuBLAS handle and
// its GEMM scratch), kept per device and precision: a runner takes one for
// its life and gives it back, so a worker makes them once rather than per
// shard or query. Runners alive at once (a shard and a query) hold
// different contexts. At most kMaxIdle wait per device and precision; more
// are destroyed when given back. Thread-safe.
#ifndef LACT_WORKER_CUDA_CONTEXT_POOL_H_
#define LACT_WORKER_CUDA_CONTEXT_POOL_H_

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/device.h"

namespace lact {

class CudaContextPool {
 public:
  static constexpr size_t kMaxIdle = 4;
  // A context taken from the pool; it goes back when released.
  using Lease = std::unique_ptr<cuda::CudaContext, std::function<void(cuda::CudaContext*)>>;

  // An idle context of `device` and `precision`, or a new one
  // (FAILED_PRECONDITION when there is no such device).
  absl::StatusOr<Lease> Take(int device, cuda::Precision precision) ABSL_LOCKS_EXCLUDED(mu_);
  // Contexts waiting to be taken again (for tests).
  size_t idle() const ABSL_LOCKS_EXCLUDED(mu_);

  // The worker process's pool; never destroyed.
  static CudaContextPool& Process();

 private:
  void GiveBack(cuda::CudaContext* context) ABSL_LOCKS_EXCLUDED(mu_);

  using Key = std::pair<int, cuda::Precision>;
  mutable absl::Mutex mu_;
  std::map<Key, std::vector<std::unique_ptr<cuda::CudaContext>>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_CONTEXT_POOL_H_
