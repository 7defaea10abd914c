// The host side of a CudaOps sequence: rows in (the tokens) and rows out
// (the output) in tiles, through two page-locked staging buffers and two
// device tile buffers, on a copy stream of its own. With two of each, the
// host's copy of one tile, the DMA of the next and the compute stream's
// work on a third overlap; events order each buffer's reuse.
//
// Contract: one call at a time, from the thread that runs the ops; the
// compute stream is the CudaContext's. Upload and Download return once the
// host rows are consumed (Upload) or written (Download); the compute work
// they queued may still run (Upload) or has run (Download).
#ifndef LACT_WORKER_CUDA_TILE_IO_H_
#define LACT_WORKER_CUDA_TILE_IO_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/handles.h"

namespace lact {

class TileIo {
 public:
  // Tiles of at most `tile_floats` floats each (kTileFloats: 32 MiB, so the
  // four buffers are small beside the activations, and a tile's DMA is
  // long enough to hide the host's copy of the next).
  static constexpr int64_t kTileFloats = int64_t{8} << 20;
  static absl::StatusOr<std::unique_ptr<TileIo>> Create(const cuda::CudaContext& ctx,
                                                        int64_t tile_floats = kTileFloats);
  // The rows of `width` floats one tile holds (at least 1).
  int64_t TileRows(int64_t width) const;

  // Rows [0, rows) of `host` ([rows, width]) to the device, TileRows(width)
  // at a time: `use(device_rows, first, n)` queues the compute stream's work
  // on each tile's rows (valid until that work has run).
  absl::Status Upload(const float* host, int64_t rows, int64_t width,
                      const std::function<absl::Status(const float*, int64_t, int64_t)>& use);

  // The reverse: `produce(scratch, first, n)` queues on the compute stream
  // the work that makes each tile's rows and returns where they are (in
  // `scratch`, a tile buffer, or elsewhere on the device); they are copied
  // to `host` ([rows, width]).
  absl::Status Download(
      float* host, int64_t rows, int64_t width,
      const std::function<absl::StatusOr<const float*>(float*, int64_t, int64_t)>& produce);

 private:
  TileIo(const cuda::CudaContext& ctx, int64_t tile_floats)
      : ctx_(ctx), tile_floats_(tile_floats) {}
  cudaStream_t compute() const { return ctx_.stream(); }
  // TileRows, or INTERNAL when one row does not fit a tile.
  absl::StatusOr<int64_t> WholeRows(int64_t width) const;

  const cuda::CudaContext& ctx_;
  const int64_t tile_floats_;
  cuda::StreamHandle copy_;
  cuda::PinnedFloats staging_[2];
  cuda::DeviceBuffer tiles_[2];
  // Per buffer pair k: the copy stream's last DMA done, and the compute
  // stream's last work on the device tile done.
  cuda::EventHandle dma_done_[2], compute_done_[2];
};

}  // namespace lact

#endif  // LACT_WORKER_CUDA_TILE_IO_H_
