#include "worker/collective/nccl_collective.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/rendezvous/store.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "worker/collective/rendezvous_timeout.h"

// The NCCL counterpart of LACT_CUDA_RETURN_IF_ERROR, for calls that are done
// when they return (the calls that queue work go through Enqueued).
#define LACT_NCCL_RETURN_IF_ERROR(expr)                                         \
  do {                                                                          \
    const ncclResult_t lact_nccl_err_ = (expr);                                 \
    if (lact_nccl_err_ != ncclSuccess) return NcclError(#expr, lact_nccl_err_); \
  } while (0)

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;

// Between two looks at an event or the communicator's state.
constexpr auto kPollInterval = std::chrono::microseconds(50);

// UNAVAILABLE when a peer or the network is gone, INTERNAL otherwise.
absl::Status NcclError(const char* call, ncclResult_t result) {
  std::string message = absl::StrCat(call, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  if (result == ncclRemoteError || result == ncclSystemError) {
    return absl::UnavailableError(absl::StrCat(message, "; a peer or the network is gone"));
  }
  return absl::InternalError(message);
}

// Polls until `comm` has left the in-progress state (its setup, or the call
// that queued work, is done) and, when `event` is set, `event` has completed.
// A timeout comes back as DEADLINE_EXCEEDED for NcclCollective::Fail to word.
absl::Status Await(ncclComm_t comm, cudaEvent_t event, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    LACT_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      return NcclError("asynchronous error", state);
    }
    if (state == ncclSuccess) {
      if (event == nullptr) return absl::OkStatus();
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) {
        return absl::InternalError(absl::StrCat("cudaEventQuery: ", cudaGetErrorString(query)));
      }
    }
    if (Clock::now() >= deadline) return absl::DeadlineExceededError("");
    std::this_thread::sleep_for(kPollInterval);
  }
}

// After a call that queues work on a non-blocking communicator: ncclInProgress
// means NCCL is still taking it on a thread of its own (on first use it also
// connects the peers), and nothing may be queued behind it until it has.
absl::Status Enqueued(ncclComm_t comm, ncclResult_t result, const char* call,
                      Clock::time_point deadline) {
  if (result == ncclInProgress) return Await(comm, nullptr, deadline);
  if (result != ncclSuccess) return NcclError(call, result);
  return absl::OkStatus();
}

// What is left until `deadline`, at least 1 ms: Gloo reads 0 as "no timeout".
std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Connect(
    gloo::rendezvous::Store& store, const std::string& prefix, int rank, int size,
    const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", rank, " is outside a group of ", size));
  }
  if (options.timeout <= std::chrono::milliseconds::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: the timeout must be positive, not ", options.timeout.count(), " ms"));
  }
  const int visible = cuda::DeviceCount();
  if (options.device < 0 || options.device >= visible) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL rank ", rank, ": no CUDA device ",
                                                      options.device, " (", visible, " visible)"));
  }
  const Clock::time_point deadline = Clock::now() + options.timeout;
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  std::unique_ptr<NcclCollective> c(new NcclCollective(rank, size, options));
  absl::Status status = c->CreateStreamAndEvents();
  absl::StatusOr<std::string> id;
  if (status.ok()) {
    id = c->ExchangeId(store, prefix + "/nccl_id", deadline);
    status = id.status();
  }
  if (status.ok()) status = c->InitCommunicator(*id, deadline);
  if (!status.ok()) {
    return c->Fail(absl::StrCat("NCCL communicator setup (rank ", rank, " of ", size, ", device ",
                                options.device, ")"),
                   status);
  }
  return c;
}

absl::Status NcclCollective::CreateStreamAndEvents() {
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(stream_.out(), cudaStreamNonBlocking));
  LACT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(compute_ready_.out(), cudaEventDisableTiming));
  LACT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(host_done_.out(), cudaEventDisableTiming));
  LACT_CUDA_RETURN_IF_ERROR(cudaEventCreate(busy_start_.out()));
  LACT_CUDA_RETURN_IF_ERROR(cudaEventCreate(busy_end_.out()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> NcclCollective::ExchangeId(gloo::rendezvous::Store& store,
                                                       const std::string& key,
                                                       Clock::time_point deadline) {
  if (rank_ == 0) {
    ncclUniqueId id;
    LACT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    try {
      store.set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("publishing the id under '", key, "': ", e.what()));
    }
    return std::string(id.internal, sizeof(id.internal));
  }
  std::vector<char> bytes;
  try {
    store.wait({key}, Remaining(deadline));
    bytes = store.get(key);
  } catch (const RendezvousTimeout& e) {
    return absl::DeadlineExceededError(
        absl::StrCat("waiting for rank 0's id under '", key, "': ", e.what()));
  } catch (const std::exception& e) {
    const std::string cause = absl::StrCat("waiting for rank 0's id under '", key, "': ", e.what());
    return Clock::now() >= deadline ? absl::DeadlineExceededError(cause)
                                    : absl::UnavailableError(cause);
  }
  if (bytes.size() != sizeof(ncclUniqueId)) {
    return absl::InternalError(absl::StrCat("the id under '", key, "' has ", bytes.size(),
                                            " bytes, not ", sizeof(ncclUniqueId)));
  }
  return std::string(bytes.begin(), bytes.end());
}

absl::Status NcclCollective::InitCommunicator(const std::string& id, Clock::time_point deadline) {
  ncclUniqueId unique;
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  // Non-blocking, so that every wait below has a deadline and an abort can
  // stop the setup while it waits for a peer that never comes.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, size_, unique, rank_, &config);
  comm_ = comm;
  if (comm_ == nullptr) {
    return NcclError("ncclCommInitRankConfig", result == ncclSuccess ? ncclInternalError : result);
  }
  return Enqueued(comm_, result, "ncclCommInitRankConfig", deadline);
}

NcclCollective::~NcclCollective() {
  (void)cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // Destroy waits for the communicator's queued work; abort stops it. Only
    // an idle, healthy communicator is destroyed (ncclCommDestroy also fails,
    // leaving it behind, when the communicator holds an error).
    ncclResult_t state = ncclInProgress;
    const bool idle =
        !in_flight_ && ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclSuccess;
    if (idle) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
  }
  if (staging_ != nullptr) (void)cudaFreeAsync(staging_, stream_.get());
}

absl::Status NcclCollective::AllReduceSum(float* data, size_t count) {
  LACT_RETURN_IF_ERROR(Usable(/*host_operation=*/true));
  if (count == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("NCCL all-reduce of a null host pointer");
  const absl::Status status = HostAllReduce(data, count);
  return status.ok() ? status : Fail(Describe("all-reduce", count), status);
}

absl::Status NcclCollective::AllGather(const float* in, size_t count, float* out) {
  LACT_RETURN_IF_ERROR(Usable(/*host_operation=*/true));
  if (count == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("NCCL all-gather of a null host pointer");
  }
  if (count > std::numeric_limits<size_t>::max() / sizeof(float) / size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL all-gather of ", count, " floats from ", size_, " ranks overflows"));
  }
  const absl::Status status = HostAllGather(in, count, out);
  return status.ok() ? status : Fail(Describe("all-gather", count), status);
}

absl::Status NcclCollective::Start(float* data, size_t count, cudaStream_t compute) {
  LACT_RETURN_IF_ERROR(Usable(/*host_operation=*/false));
  if (in_flight_) {
    return absl::FailedPreconditionError(
        "NCCL: Start while an all-reduce is in flight; call Finish first");
  }
  if (data == nullptr && count > 0) {
    return absl::InvalidArgumentError("NCCL all-reduce of a null device pointer");
  }
  const absl::Status status = StartAllReduce(data, count, compute);
  return status.ok() ? status : Fail(Describe("all-reduce", count), status);
}

absl::Status NcclCollective::Finish(cudaStream_t compute) {
  LACT_RETURN_IF_ERROR(Usable(/*host_operation=*/false));
  if (!in_flight_) return absl::FailedPreconditionError("NCCL: Finish without a Start");
  const Clock::time_point start = Clock::now();
  in_flight_ = false;
  const absl::Status status = FinishAllReduce(compute);
  waited_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return status.ok() ? status : Fail(Describe("all-reduce", in_flight_count_), status);
}

absl::Status NcclCollective::Usable(bool host_operation) const {
  if (broken_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the NCCL communicator was aborted after an earlier error: ", broken_reason_));
  }
  if (host_operation && in_flight_) {
    return absl::FailedPreconditionError(
        "NCCL: a host operation while a device all-reduce is in flight; call Finish first");
  }
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

absl::Status NcclCollective::HostAllReduce(float* data, size_t count) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  const size_t bytes = count * sizeof(float);
  LACT_RETURN_IF_ERROR(Reserve(count));
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging_, data, bytes, cudaMemcpyHostToDevice, stream_.get()));
  LACT_RETURN_IF_ERROR(Enqueued(
      comm_, ncclAllReduce(staging_, staging_, count, ncclFloat, ncclSum, comm_, stream_.get()),
      "ncclAllReduce", deadline));
  // The copy back is queued only once the sum is done: a copy to pageable
  // memory holds the host until it has run, and that wait has no deadline.
  LACT_RETURN_IF_ERROR(Drain(deadline));
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(data, staging_, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  return Drain(deadline);
}

absl::Status NcclCollective::HostAllGather(const float* in, size_t count, float* out) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  const size_t total = count * size_;
  LACT_RETURN_IF_ERROR(Reserve(total));
  // In place: this rank's input is its slot of the output.
  float* mine = staging_ + static_cast<size_t>(rank_) * count;
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(mine, in, count * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  LACT_RETURN_IF_ERROR(
      Enqueued(comm_, ncclAllGather(mine, staging_, count, ncclFloat, comm_, stream_.get()),
               "ncclAllGather", deadline));
  LACT_RETURN_IF_ERROR(Drain(deadline));  // see HostAllReduce
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out, staging_, total * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  return Drain(deadline);
}

absl::Status NcclCollective::StartAllReduce(float* data, size_t count, cudaStream_t compute) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_ready_.get(), compute));
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_.get(), compute_ready_.get(), 0));
  LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(busy_start_.get(), stream_.get()));
  if (count > 0) {
    LACT_RETURN_IF_ERROR(
        Enqueued(comm_, ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, stream_.get()),
                 "ncclAllReduce", deadline));
  }
  LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(busy_end_.get(), stream_.get()));
  in_flight_ = true;
  in_flight_count_ = count;
  return absl::OkStatus();
}

absl::Status NcclCollective::FinishAllReduce(cudaStream_t compute) {
  LACT_RETURN_IF_ERROR(Await(comm_, busy_end_.get(), Clock::now() + timeout_));
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, busy_end_.get(), 0));
  float ms = 0;
  LACT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, busy_start_.get(), busy_end_.get()));
  busy_seconds_ += ms / 1e3;
  return absl::OkStatus();
}

absl::Status NcclCollective::Reserve(size_t floats) {
  if (floats <= staging_floats_) return absl::OkStatus();
  // Stream-ordered, unlike cudaFree, which waits for the whole device, where
  // another communicator's operation may be waiting on its peers.
  if (staging_ != nullptr) {
    LACT_CUDA_RETURN_IF_ERROR(cudaFreeAsync(staging_, stream_.get()));
    staging_ = nullptr;
    staging_floats_ = 0;
  }
  void* p = nullptr;
  LACT_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&p, floats * sizeof(float), stream_.get()));
  staging_ = static_cast<float*>(p);
  staging_floats_ = floats;
  return absl::OkStatus();
}

absl::Status NcclCollective::Drain(Clock::time_point deadline) {
  LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(host_done_.get(), stream_.get()));
  return Await(comm_, host_done_.get(), deadline);
}

absl::Status NcclCollective::Fail(const std::string& what, const absl::Status& cause) {
  std::string message;
  if (absl::IsDeadlineExceeded(cause)) {
    message = absl::StrCat(what, " did not finish within ", timeout_.count(),
                           " ms; a peer is gone or stalled");
    if (!cause.message().empty()) absl::StrAppend(&message, " (", cause.message(), ")");
  } else {
    message = absl::StrCat(what, " failed: ", cause.message());
  }
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  broken_ = true;
  broken_reason_ = message;
  in_flight_ = false;
  return absl::Status(cause.code(), message);
}

std::string NcclCollective::Describe(const char* operation, size_t count) const {
  return absl::StrCat("NCCL ", operation, " of ", count, " floats (rank ", rank_, " of ", size_,
                      ")");
}

}  // namespace lact
