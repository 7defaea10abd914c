#include "worker/collective/host_staged_allreduce.h"

#include <chrono>

#include "kernels/cuda/cuda_check.h"

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

HostStagedAllReduce::~HostStagedAllReduce() {
  if (pending_.valid()) pending_.wait();  // the thread writes into pinned_
}

absl::Status HostStagedAllReduce::Start(float* data, size_t count, cudaStream_t compute) {
  if (pending_.valid()) return absl::FailedPreconditionError("an all-reduce is already in flight");
  if (count > pinned_.capacity()) {
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute));  // the last copy back reads pinned_
    LACT_CUDA_RETURN_IF_ERROR(pinned_.Reserve(count));
  }
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pinned_.get(), data, count * sizeof(float), cudaMemcpyDeviceToHost, compute));
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute));
  data_ = data;
  count_ = count;
  pending_ = std::async(std::launch::async, [this] {
    const auto start = Clock::now();
    absl::Status s = host_->AllReduceSum(pinned_.get(), count_);
    busy_seconds_ += Seconds(Clock::now() - start);
    return s;
  });
  return absl::OkStatus();
}

absl::Status HostStagedAllReduce::Finish(cudaStream_t compute) {
  if (!pending_.valid()) return absl::FailedPreconditionError("no all-reduce in flight");
  const auto start = Clock::now();
  absl::Status status = pending_.get();
  waited_seconds_ += Seconds(Clock::now() - start);
  if (!status.ok()) return status;
  // The next Start synchronizes the stream before it overwrites pinned_.
  LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data_, pinned_.get(), count_ * sizeof(float),
                                            cudaMemcpyHostToDevice, compute));
  return absl::OkStatus();
}

}  // namespace lact
