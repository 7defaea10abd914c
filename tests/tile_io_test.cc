// TileIo (worker/cuda/tile_io.h), the CUDA backend's host I/O (ctest label
// `gpu`; also in the CUDA emulation): rows go up and come back through
// tiles much smaller than the data, with a ragged last tile, each tile's
// device rows handed to the compute stream's work in order; a row wider
// than a tile is an error, not an overrun.
#include "worker/cuda/tile_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/device.h"
#include "tests/random_model.h"

namespace lact::testing {
namespace {

absl::Status CopyRows(const cuda::CudaContext& ctx, float* to, const float* from, int64_t floats) {
  if (cudaMemcpyAsync(to, from, floats * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream()) !=
      cudaSuccess) {
    return absl::InternalError("cudaMemcpyAsync");
  }
  return absl::OkStatus();
}

TEST(TileIo, RowsGoUpAndComeBackThroughSmallTiles) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  constexpr int64_t kRows = 23, kWidth = 7;
  absl::StatusOr<std::unique_ptr<TileIo>> io = TileIo::Create(**ctx, 3 * kWidth + 2);
  ASSERT_TRUE(io.ok()) << io.status();
  ASSERT_EQ((*io)->TileRows(kWidth), 3);
  const Tensor rows = RandomTokens(kRows, kWidth, 5);
  absl::StatusOr<cuda::DeviceBuffer> device = cuda::DeviceBuffer::Allocate(kRows * kWidth);
  ASSERT_TRUE(device.ok());

  std::vector<int64_t> firsts;
  absl::Status up =
      (*io)->Upload(rows.ptr(), kRows, kWidth, [&](const float* tile, int64_t first, int64_t n) {
        firsts.push_back(first);
        return CopyRows(**ctx, device->get() + first * kWidth, tile, n * kWidth);
      });
  ASSERT_TRUE(up.ok()) << up;
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 3, 6, 9, 12, 15, 18, 21}));

  // Rows that stay where they are on the device, and rows made into the
  // tile buffer given.
  for (bool into_scratch : {false, true}) {
    Tensor back({kRows, kWidth});
    absl::Status down = (*io)->Download(
        back.ptr(), kRows, kWidth,
        [&](float* scratch, int64_t first, int64_t n) -> absl::StatusOr<const float*> {
          const float* source = device->get() + first * kWidth;
          if (!into_scratch) return source;
          absl::Status copied = CopyRows(**ctx, scratch, source, n * kWidth);
          if (!copied.ok()) return copied;
          return scratch;
        });
    ASSERT_TRUE(down.ok()) << down;
    EXPECT_EQ(std::memcmp(back.ptr(), rows.ptr(), rows.size() * sizeof(float)), 0)
        << "into_scratch " << into_scratch;
  }

  Tensor wide({2, 30});
  const absl::Status refused = (*io)->Upload(
      wide.ptr(), 2, 30, [](const float*, int64_t, int64_t) { return absl::OkStatus(); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace lact::testing
