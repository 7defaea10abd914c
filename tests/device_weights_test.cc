// The weights of the CUDA backend on the device (ctest label `gpu`; also in
// the CUDA emulation): a process's cache uploads a model once per device
// and precision and frees it after the model is gone; runners made from
// the cache compute exactly what a runner with its own upload does; a bf16
// GEMM that reads a weight's bf16 rounding made ahead gives the same bits
// as one that rounds the weight itself. The device's memory reads what is
// allocated on it. The process's contexts are taken and given back.
#include "worker/cuda/device_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"
#include "tests/random_model.h"
#include "worker/cuda/context_pool.h"
#include "worker/cuda/cuda_runner.h"

namespace lact::testing {
namespace {

#define LACT_SKIP_WITHOUT_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

ModelConfig SmallConfig() {
  return {.d_model = 32,
          .n_layers = 2,
          .d_input = 12,
          .ssm = {.head_dim = 16, .d_state = 8},
          .ttt = {.head_dim = 16, .chunk_tokens = 16},
          .mlp_hidden = 48};
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && std::memcmp(a.ptr(), b.ptr(), a.size() * sizeof(float)) == 0;
}

// What a CUDA worker's metrics report (lact_worker_gpu_memory_*_bytes).
TEST(DeviceMemory, CountsWhatIsAllocated) {
  LACT_SKIP_WITHOUT_GPU();
  absl::StatusOr<cuda::DeviceMemory> before = cuda::QueryDeviceMemory(0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(before->total_bytes, 0);
  EXPECT_LE(before->used_bytes, before->total_bytes);
  const size_t floats = size_t{16} << 20;  // 64 MiB
  absl::StatusOr<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(floats);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  absl::StatusOr<cuda::DeviceMemory> after = cuda::QueryDeviceMemory(0);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->used_bytes - before->used_bytes, static_cast<int64_t>(floats * sizeof(float)));
  EXPECT_EQ(after->total_bytes, before->total_bytes);
  EXPECT_FALSE(cuda::QueryDeviceMemory(cuda::DeviceCount()).ok());
}

TEST(CudaContextPool, AContextGivenBackIsTakenAgainAndTwoAtOnceDiffer) {
  LACT_SKIP_WITHOUT_GPU();
  CudaContextPool pool;
  absl::StatusOr<CudaContextPool::Lease> a = pool.Take(0, cuda::Precision::kFp32);
  absl::StatusOr<CudaContextPool::Lease> b = pool.Take(0, cuda::Precision::kFp32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->get(), b->get()) << "runners alive at once hold different contexts";
  const cuda::CudaContext* first = a->get();
  a->reset();
  EXPECT_EQ(pool.idle(), 1u);
  absl::StatusOr<CudaContextPool::Lease> again = pool.Take(0, cuda::Precision::kFp32);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first) << "a context given back is taken again";
  absl::StatusOr<CudaContextPool::Lease> bf16 = pool.Take(0, cuda::Precision::kBf16);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ((*bf16)->precision(), cuda::Precision::kBf16);
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_FALSE(pool.Take(cuda::DeviceCount(), cuda::Precision::kFp32).ok());
}

TEST(DeviceWeightsCache, OneUploadPerModelDeviceAndPrecision) {
  LACT_SKIP_WITHOUT_GPU();
  DeviceWeightsCache cache;
  auto model = std::make_shared<const Model>(RandomTestModel(SmallConfig(), 3));
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> fp32 = cuda::CudaContext::Create(0);
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> bf16 =
      cuda::CudaContext::Create(0, cuda::Precision::kBf16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());

  absl::StatusOr<std::shared_ptr<const DeviceWeights>> first = cache.Get(model, **fp32);
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> again = cache.Get(model, **fp32);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->get(), again->get());
  EXPECT_EQ(cache.uploads(), 1);
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> rounded = cache.Get(model, **bf16);
  ASSERT_TRUE(rounded.ok());
  EXPECT_NE(rounded->get(), first->get());
  EXPECT_EQ(cache.uploads(), 2);
  EXPECT_GT((*rounded)->bytes(), (*first)->bytes()) << "bf16 keeps the rounded copies too";

  std::weak_ptr<const DeviceWeights> dropped = *first;
  first->reset();
  again->reset();
  model.reset();
  auto other = std::make_shared<const Model>(RandomTestModel(SmallConfig(), 4));
  ASSERT_TRUE(cache.Get(other, **fp32).ok());
  EXPECT_EQ(cache.uploads(), 3);
  EXPECT_TRUE(dropped.expired()) << "a gone model's weights are freed";
}

TEST(DeviceWeightsCache, RunnersFromTheCacheComputeWhatAnOwnUploadDoes) {
  LACT_SKIP_WITHOUT_GPU();
  const ModelConfig config = SmallConfig();
  auto model = std::make_shared<const Model>(RandomTestModel(config, 5));
  const Tensor context = RandomTokens(30, config.input_width(), 6);
  const Tensor query = RandomTokens(5, config.input_width(), 7);
  for (const char* precision : {"fp32", "bf16"}) {
    BackendOptions options{.backend = "cuda"};
    options.precision = precision;
    absl::StatusOr<std::unique_ptr<CudaRunner>> own = CudaRunner::Create(*model, config, options);
    ASSERT_TRUE(own.ok()) << own.status();
    DeviceWeightsCache cache;
    Tensor outputs[2], queries[2];
    for (int shard = 0; shard < 2; ++shard) {
      absl::StatusOr<std::unique_ptr<CudaRunner>> cached =
          CudaRunner::Create(model, config, options, {}, cache);
      ASSERT_TRUE(cached.ok()) << cached.status();
      FusedState state;
      absl::StatusOr<Tensor> out = (*cached)->RunContext(context, &state);
      ASSERT_TRUE(out.ok()) << out.status();
      absl::StatusOr<Tensor> q = (*cached)->RunQuery(query, state);
      ASSERT_TRUE(q.ok()) << q.status();
      outputs[shard] = *std::move(out);
      queries[shard] = *std::move(q);
    }
    EXPECT_EQ(cache.uploads(), 1) << precision;
    FusedState state;
    absl::StatusOr<Tensor> out = (*own)->RunContext(context, &state);
    ASSERT_TRUE(out.ok()) << out.status();
    absl::StatusOr<Tensor> q = (*own)->RunQuery(query, state);
    ASSERT_TRUE(q.ok()) << q.status();
    for (int shard = 0; shard < 2; ++shard) {
      EXPECT_TRUE(SameBits(outputs[shard], *out)) << precision;
      EXPECT_TRUE(SameBits(queries[shard], *q)) << precision;
    }
  }
}

TEST(GemmInput, ABf16RoundingMadeAheadGivesTheSameBits) {
  LACT_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx =
      cuda::CudaContext::Create(0, cuda::Precision::kBf16);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  constexpr int64_t kRows = 7, kIn = 24, kOut = 10, kSkip = 3;
  const Tensor x = RandomTokens(kRows, kIn, 1);
  const Tensor w = RandomTokens(kOut + kSkip, kIn, 2);
  absl::StatusOr<cuda::DeviceBuffer> dx = (*ctx)->Upload(x.ptr(), x.size());
  absl::StatusOr<cuda::DeviceBuffer> dw = (*ctx)->Upload(w.ptr(), w.size());
  absl::StatusOr<cuda::DeviceBuffer> rounded = cuda::DeviceBuffer::Allocate((w.size() + 1) / 2);
  absl::StatusOr<cuda::DeviceBuffer> y = cuda::DeviceBuffer::Allocate(2 * kRows * kOut);
  ASSERT_TRUE(dx.ok() && dw.ok() && rounded.ok() && y.ok());
  auto* w16 = reinterpret_cast<__nv_bfloat16*>(rounded->get());
  ASSERT_TRUE(cuda::RoundToBf16((*ctx)->stream(), dw->get(), w.size(), w16).ok());
  // Rows kSkip.. of w, as a weight offset into a larger tensor is used.
  const cuda::GemmInput ahead = cuda::GemmInput(dw->get(), w16).Offset(kSkip * kIn);
  ASSERT_TRUE(
      cuda::Linear(**ctx, dx->get(), kIn, kRows, kIn, dw->get() + kSkip * kIn, kOut, y->get(), kOut)
          .ok());
  ASSERT_TRUE(
      cuda::Linear(**ctx, dx->get(), kIn, kRows, kIn, ahead, kOut, y->get() + kRows * kOut, kOut)
          .ok());
  Tensor got({2 * kRows, kOut});
  ASSERT_TRUE((*ctx)->Download(y->get(), got.size(), got.ptr()).ok());
  EXPECT_EQ(std::memcmp(got.ptr(), got.ptr() + kRows * kOut, kRows * kOut * sizeof(float)), 0);
  double sum = 0;
  for (float v : got.data) sum += std::abs(v);
  EXPECT_GT(sum, 0) << "the product is not all zeros";
}

}  // namespace
}  // namespace lact::testing
