// The gradient all-reduce of a GPU shard runner: a sum over the ranks of a
// group of device memory, started behind the work already queued on the
// compute stream and finished before the work that reads it, so that the
// kernels queued in between (the BiMamba scans) overlap the communication.
//
// Contract: every rank calls Start/Finish in the same order with the same
// counts; at most one all-reduce is in flight; `data` stays untouched by
// the caller between Start and Finish. Finish returns the first error of the
// operation (a peer gone, a timeout) as a status; it never hangs past the
// implementation's timeout. Used from one thread.
#ifndef LACT_WORKER_COLLECTIVE_DEVICE_ALLREDUCE_H_
#define LACT_WORKER_COLLECTIVE_DEVICE_ALLREDUCE_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace lact {

class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  virtual int size() const = 0;
  // data[0:count] (device) <- sum over ranks, once `compute`'s queued work is done.
  virtual absl::Status Start(float* data, size_t count, cudaStream_t compute) = 0;
  // `compute`'s later work sees the sum.
  virtual absl::Status Finish(cudaStream_t compute) = 0;
  // Seconds the all-reduce took, and the part of them the caller waited in Finish.
  virtual double busy_seconds() const = 0;
  virtual double waited_seconds() const = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_DEVICE_ALLREDUCE_H_
