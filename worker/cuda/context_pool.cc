#include "worker/cuda/context_pool.h"

#include "common/status_macros.h"

namespace lact {

absl::StatusOr<CudaContextPool::Lease> CudaContextPool::Take(int device,
                                                             cuda::Precision precision) {
  const auto give_back = [this](cuda::CudaContext* context) { GiveBack(context); };
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::unique_ptr<cuda::CudaContext>>& idle = idle_[{device, precision}];
    if (!idle.empty()) {
      Lease lease(idle.back().release(), give_back);
      idle.pop_back();
      return lease;
    }
  }
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaContext> made,
                        cuda::CudaContext::Create(device, precision));
  return Lease(made.release(), give_back);
}

size_t CudaContextPool::idle() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, contexts] : idle_) n += contexts.size();
  return n;
}

void CudaContextPool::GiveBack(cuda::CudaContext* context) {
  std::unique_ptr<cuda::CudaContext> owned(context);
  // Whatever the last runner queued on its stream is done before the next
  // takes the context; a failed sync costs the context, not the runner.
  if (!owned->Activate().ok() || !owned->Synchronize().ok()) return;
  absl::MutexLock lock(&mu_);
  std::vector<std::unique_ptr<cuda::CudaContext>>& idle =
      idle_[{owned->device(), owned->precision()}];
  if (idle.size() < kMaxIdle) idle.push_back(std::move(owned));
}

CudaContextPool& CudaContextPool::Process() {
  static CudaContextPool* const pool = new CudaContextPool;
  return *pool;
}

}  // namespace lact
