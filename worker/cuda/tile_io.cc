#include "worker/cuda/tile_io.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"

namespace lact {
namespace {

// memcpy on up to kCopyThreads threads, in 1 MiB slices: one core copies
// a few GB/s, and on the way down the destination's pages are often
// touched for the first time, so a tile's host copy on one thread takes
// longer than its DMA and the GPU's work on it.
constexpr int kCopyThreads = 8;
void HostCopy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kSlice = size_t{1} << 20;
  const int64_t slices = static_cast<int64_t>((bytes + kSlice - 1) / kSlice);
  const int threads =
      static_cast<int>(std::min<int64_t>({kCopyThreads, omp_get_num_procs(), slices}));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t i = 0; i < slices; ++i) {
    const size_t offset = static_cast<size_t>(i) * kSlice;
    std::memcpy(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset,
                std::min(kSlice, bytes - offset));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TileIo>> TileIo::Create(const cuda::CudaContext& ctx,
                                                       int64_t tile_floats) {
  auto io = std::unique_ptr<TileIo>(new TileIo(ctx, std::max<int64_t>(tile_floats, 1)));
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(io->copy_.out(), cudaStreamNonBlocking));
  for (int k = 0; k < 2; ++k) {
    LACT_CUDA_RETURN_IF_ERROR(io->staging_[k].Reserve(io->tile_floats_));
    LACT_ASSIGN_OR_RETURN(io->tiles_[k], cuda::DeviceBuffer::Allocate(io->tile_floats_));
    LACT_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(io->dma_done_[k].out(), cudaEventDisableTiming));
    LACT_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(io->compute_done_[k].out(), cudaEventDisableTiming));
  }
  return io;
}

absl::StatusOr<int64_t> TileIo::WholeRows(int64_t width) const {
  if (width > tile_floats_) return absl::InternalError("TileIo: a row is wider than a tile");
  return TileRows(width);
}

int64_t TileIo::TileRows(int64_t width) const {
  return std::max<int64_t>(1, tile_floats_ / std::max<int64_t>(width, 1));
}

// An event not yet recorded is complete: the first two tiles wait for
// nothing.
absl::Status TileIo::Upload(
    const float* host, int64_t rows, int64_t width,
    const std::function<absl::Status(const float*, int64_t, int64_t)>& use) {
  LACT_ASSIGN_OR_RETURN(const int64_t tile_rows, WholeRows(width));
  for (int64_t first = 0, t = 0; first < rows; first += tile_rows, ++t) {
    const int k = static_cast<int>(t % 2);
    const int64_t n = std::min(tile_rows, rows - first);
    const size_t bytes = static_cast<size_t>(n * width) * sizeof(float);
    // The staging buffer's last DMA (tile t - 2) has read it.
    LACT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(dma_done_[k].get()));
    HostCopy(staging_[k].get(), host + first * width, bytes);
    // The compute stream is done with the device tile before it is refilled.
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_.get(), compute_done_[k].get(), 0));
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tiles_[k].get(), staging_[k].get(), bytes,
                                              cudaMemcpyHostToDevice, copy_.get()));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(dma_done_[k].get(), copy_.get()));
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute(), dma_done_[k].get(), 0));
    LACT_RETURN_IF_ERROR(use(tiles_[k].get(), first, n));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_[k].get(), compute()));
  }
  return absl::OkStatus();
}

absl::Status TileIo::Download(
    float* host, int64_t rows, int64_t width,
    const std::function<absl::StatusOr<const float*>(float*, int64_t, int64_t)>& produce) {
  LACT_ASSIGN_OR_RETURN(const int64_t tile_rows, WholeRows(width));
  // The tile whose DMA was queued last, still to be copied to the host.
  int64_t pending_first = 0, pending_rows = 0;
  int pending_k = 0;
  const auto drain = [&]() -> absl::Status {
    if (pending_rows == 0) return absl::OkStatus();
    LACT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(dma_done_[pending_k].get()));
    HostCopy(host + pending_first * width, staging_[pending_k].get(),
             static_cast<size_t>(pending_rows * width) * sizeof(float));
    pending_rows = 0;
    return absl::OkStatus();
  };
  for (int64_t first = 0, t = 0; first < rows; first += tile_rows, ++t) {
    const int k = static_cast<int>(t % 2);
    const int64_t n = std::min(tile_rows, rows - first);
    // The device tile's last DMA (tile t - 2) has read it before it is
    // rewritten; its staging buffer was drained at tile t - 1.
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute(), dma_done_[k].get(), 0));
    LACT_ASSIGN_OR_RETURN(const float* device_rows, produce(tiles_[k].get(), first, n));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_[k].get(), compute()));
    LACT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_.get(), compute_done_[k].get(), 0));
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_[k].get(), device_rows,
                                              static_cast<size_t>(n * width) * sizeof(float),
                                              cudaMemcpyDeviceToHost, copy_.get()));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(dma_done_[k].get(), copy_.get()));
    LACT_RETURN_IF_ERROR(drain());  // tile t - 1, while tile t is made and copied
    pending_first = first;
    pending_rows = n;
    pending_k = k;
  }
  return drain();
}

}  // namespace lact
