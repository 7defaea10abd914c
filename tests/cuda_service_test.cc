// End to end with GPU workers (ctest label `gpu`; skipped without a CUDA
// device): real coordinator and `lact-worker --backend cuda` processes on
// 127.0.0.1, every golden case through one CUDA worker and through two CUDA
// workers sharing device 0 (Gloo between them, the gradient all-reduce
// staged through the host), in fp32 (within 1e-4 of the golden values).
// Then the same two-worker run in bf16 finishes with finite outputs, and
// each worker's metrics show its GPU's memory in use.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"
#include "tests/metrics_scrape.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

TEST(CudaService, GoldenCasesThroughOneAndTwoCudaWorkers) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(2, {"--backend", "cuda", "--device", "0"});
  ASSERT_NE(cluster, nullptr);
  LactClient client(cluster->address());
  for (const std::string& name : GoldenCaseNames()) {
    absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    const int64_t L = golden->context.dim(0);
    for (int workers : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(name, " over ", workers, " CUDA workers"));
      SubmitOptions o = GoldenOptions(*golden);
      o.workers = workers;
      if (workers == 2) o.shard_tokens = {L / 3, L - L / 3};
      absl::StatusOr<JobResult> got = client.Submit(o, golden->context, golden->queries);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->shards.size(), static_cast<size_t>(workers));
      ExpectGolden(*golden, *got);
    }
  }
}

TEST(CudaService, Bf16WorkersFinish) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(2, {"--backend", "cuda", "--device", "0", "--precision", "bf16"});
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(GoldenCaseNames().front());
  ASSERT_TRUE(golden.ok()) << golden.status();
  SubmitOptions o = GoldenOptions(*golden);
  o.workers = 2;
  absl::StatusOr<JobResult> got =
      LactClient(cluster->address()).Submit(o, golden->context, golden->queries);
  ASSERT_TRUE(got.ok()) << got.status();
  for (float v : got->output.data) ASSERT_TRUE(std::isfinite(v));
  // bf16 GEMM operands: far from fp32's 1e-4, far closer than noise.
  EXPECT_LE(RelativeError(got->output, golden->expected.at("output")), 5e-2);

  absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
      LactClient(cluster->address()).ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  for (const v1::WorkerInfo& w : *workers) {
    const std::string scrape = Scrape(w.metrics_address());
    const double used = Sample(scrape, "lact_worker_gpu_memory_used_bytes");
    const double total = Sample(scrape, "lact_worker_gpu_memory_total_bytes");
    EXPECT_GT(used, 0) << scrape;  // both workers' weights are on it
    EXPECT_LE(used, total);
  }
}

}  // namespace
}  // namespace lact::testing
