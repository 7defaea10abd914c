// Collective and DeviceAllReduce over NCCL, for a group of GPU ranks (one
// GPU per rank: NCCL refuses two ranks of a group on one GPU, so tests of
// more than one rank need as many GPUs). The ranks meet through a
// gloo::rendezvous::Store (in production the coordinator's KV): rank 0 makes
// the NCCL unique id and publishes it under `prefix` + "/nccl_id", the others
// read it there, so `prefix` must be fresh for every group.
//
// Contract: every rank connects with the same `size` and a distinct `rank`,
// then calls the same operations in the same order with the same counts.
// One thread at a time uses a collective; Connect and every operation make
// `options.device` the calling thread's current CUDA device (and leave it so).
// The host operations (Collective) stage through device buffers owned by the
// collective and return when the result is in host memory; they are refused
// (FAILED_PRECONDITION) while a device all-reduce is between Start and Finish.
// The communicator's first operation also connects the peers (NCCL connects
// lazily), so it waits for them like Connect does.
//
// Timeouts: no call waits longer than `options.timeout` for one wait (Connect
// for the whole setup, Start for NCCL to take the operation, Finish and each
// host operation for its completion). On a timeout (DEADLINE_EXCEEDED), an
// NCCL error (UNAVAILABLE when a peer or the network is gone, INTERNAL
// otherwise) or a CUDA error in the middle of an operation, the communicator
// is aborted and the collective is broken: every later call returns
// FAILED_PRECONDITION naming the first error, and the group must be formed
// again. Usage errors (Finish without Start, a null pointer) break nothing.
#ifndef LACT_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_
#define LACT_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/timing.h"
#include "kernels/cuda/handles.h"
#include "worker/collective/collective.h"
#include "worker/collective/device_allreduce.h"

struct ncclComm;  // nccl.h's ncclComm_t is ncclComm*; kept out of this header

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace lact {

struct NcclOptions {
  int device = 0;  // CUDA device index of this rank
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};

class NcclCollective final : public Collective, public DeviceAllReduce {
 public:
  // Blocks until all `size` ranks have joined. FAILED_PRECONDITION when
  // `options.device` does not exist; DEADLINE_EXCEEDED when the peers do not
  // all join within the timeout (the communicator is then aborted).
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Connect(gloo::rendezvous::Store& store,
                                                                 const std::string& prefix,
                                                                 int rank, int size,
                                                                 const NcclOptions& options);
  // Destroys the communicator, or aborts it when it is broken or an
  // all-reduce is still between Start and Finish.
  ~NcclCollective() override;

  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Collective: `data`, `in` and `out` are host memory.
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const float* in, size_t count, float* out) override;

  // DeviceAllReduce: `data` is device memory of `options.device`. Start
  // returns once NCCL has queued the sum behind `compute`'s work; Finish
  // waits on the host for it, then queues `compute`'s later work behind it.
  absl::Status Start(float* data, size_t count, cudaStream_t compute) override;
  absl::Status Finish(cudaStream_t compute) override;
  // Totals over every device all-reduce so far: its time on the
  // communication stream (from the end of the compute work it waited for,
  // to the end of the sum), and the host time spent in Finish.
  double busy_seconds() const override { return busy_seconds_; }
  double waited_seconds() const override { return waited_seconds_; }

 private:
  using Clock = std::chrono::steady_clock;

  NcclCollective(int rank, int size, const NcclOptions& options)
      : rank_(rank), size_(size), device_(options.device), timeout_(options.timeout) {}

  absl::Status CreateStreamAndEvents();
  absl::StatusOr<std::string> ExchangeId(gloo::rendezvous::Store& store, const std::string& key,
                                         Clock::time_point deadline);
  absl::Status InitCommunicator(const std::string& id, Clock::time_point deadline);
  // FAILED_PRECONDITION when broken (or, for a host operation, while a device
  // all-reduce is in flight); otherwise makes the device current.
  absl::Status Usable(bool host_operation) const;
  absl::Status HostAllReduce(float* data, size_t count);
  absl::Status HostAllGather(const float* in, size_t count, float* out);
  absl::Status StartAllReduce(float* data, size_t count, cudaStream_t compute);
  absl::Status FinishAllReduce(cudaStream_t compute);
  // Grows the staging buffer to at least `floats`.
  absl::Status Reserve(size_t floats);
  // Waits until the work queued so far on the communication stream is done.
  absl::Status Drain(Clock::time_point deadline);
  // Turns the cause of a failed `what` into its final status, aborts the
  // communicator and marks the collective broken.
  absl::Status Fail(const std::string& what, const absl::Status& cause);
  std::string Describe(const char* operation, size_t count) const;

  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;

  ncclComm* comm_ = nullptr;
  cuda::StreamHandle stream_;        // communication stream (non-blocking)
  cuda::EventHandle compute_ready_;  // compute's work before Start
  cuda::EventHandle host_done_;      // end of a host operation's step
  cuda::EventHandle busy_start_;     // timed, around the device all-reduce
  cuda::EventHandle busy_end_;       // timed; also the all-reduce's done event
  float* staging_ = nullptr;         // device, stream-ordered on stream_
  size_t staging_floats_ = 0;

  bool in_flight_ = false;  // a device all-reduce between Start and Finish
  size_t in_flight_count_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  double busy_seconds_ = 0;
  double waited_seconds_ = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_NCCL_COLLECTIVE_H_
