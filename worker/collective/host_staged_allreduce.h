// A DeviceAllReduce over a host Collective (Gloo's TCP transport): Start
// copies the device data into pinned host memory once the compute stream
// has produced it and runs the host all-reduce on its own thread; Finish
// waits for that thread and queues the copy back on the compute stream. The
// compute stream's work queued between the two (the BiMamba kernels) runs
// on the GPU while the host thread talks to the peers. Lets several CUDA
// workers share one GPU (NCCL cannot) and mix with any transport Gloo has.
#ifndef LACT_WORKER_COLLECTIVE_HOST_STAGED_ALLREDUCE_H_
#define LACT_WORKER_COLLECTIVE_HOST_STAGED_ALLREDUCE_H_

#include <future>

#include "kernels/cuda/handles.h"
#include "worker/collective/collective.h"
#include "worker/collective/device_allreduce.h"

namespace lact {

class HostStagedAllReduce final : public DeviceAllReduce {
 public:
  // `host` must outlive this object and not be used by others meanwhile.
  explicit HostStagedAllReduce(Collective* host) : host_(host) {}
  ~HostStagedAllReduce() override;
  HostStagedAllReduce(const HostStagedAllReduce&) = delete;
  HostStagedAllReduce& operator=(const HostStagedAllReduce&) = delete;

  int size() const override { return host_->size(); }
  absl::Status Start(float* data, size_t count, cudaStream_t compute) override;
  absl::Status Finish(cudaStream_t compute) override;
  double busy_seconds() const override { return busy_seconds_; }
  double waited_seconds() const override { return waited_seconds_; }

 private:
  Collective* host_;
  cuda::PinnedFloats pinned_;  // grown on demand
  float* data_ = nullptr;      // the device data of the all-reduce in flight
  size_t count_ = 0;
  std::future<absl::Status> pending_;
  double busy_seconds_ = 0, waited_seconds_ = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_HOST_STAGED_ALLREDUCE_H_
