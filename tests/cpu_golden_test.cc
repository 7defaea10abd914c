// The float32 CPU runner against the float64 golden files (docs/model.md, every
// tensor within max|got-want|/max|want| <= 1e-4), for several thread counts
// and tile sizes (a tile shorter than the conv width included); and the
// bf16 mode against them, within twice the error of the float64 reference
// run on bf16-rounded GEMM operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>

#include "common/status_macros.h"
#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

constexpr double kTolerance = 1e-4;

class CpuGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// A golden case's tensors from the CPU runner, named as in its expected file.
absl::StatusOr<std::map<std::string, Tensor>> RunCase(const GoldenCase& golden,
                                                      const BackendOptions& options) {
  CpuRunner runner(golden.model, golden.config, options);
  FusedState state;
  std::map<std::string, Tensor> got;
  LACT_ASSIGN_OR_RETURN(got["output"], runner.RunContext(golden.context, &state));
  for (size_t k = 0; k < golden.queries.size(); ++k) {
    LACT_ASSIGN_OR_RETURN(got["query_" + std::to_string(k)],
                          runner.RunQuery(golden.queries[k], state));
  }
  for (const auto& [tensor_name, t] : FusedStateTensors(state)) got[tensor_name] = *t;
  return got;
}

TEST_P(CpuGoldenTest, MatchesExpected) {
  const auto& [name, threads, tile] = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<std::map<std::string, Tensor>> run =
      RunCase(*golden, {.threads = threads, .tile_tokens = tile});
  ASSERT_TRUE(run.ok()) << run.status();
  std::map<std::string, Tensor>& got = *run;
  ASSERT_EQ(got.size(), golden->expected.size());
  for (const auto& [tensor_name, want] : golden->expected) {
    ASSERT_TRUE(got.count(tensor_name)) << tensor_name;
    const double err = RelativeError(got[tensor_name], want);
    EXPECT_LE(err, kTolerance) << name << " " << tensor_name;
  }
}

class CpuGoldenBf16Test : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// The bf16 mode's worst error over a case's tensors, against the golden
// file, is at most twice the float64 reference's own when every GEMM
// operand is rounded to bf16.
TEST_P(CpuGoldenBf16Test, WithinTwiceTheErrorOfBf16RoundedOperands) {
  const auto& [name, tile] = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<std::map<std::string, Tensor>> got =
      RunCase(*golden, {.threads = 2, .tile_tokens = tile, .precision = "bf16"});
  ASSERT_TRUE(got.ok()) << got.status();
  const reference::JobOutputs rounded = reference::RunJob(
      golden->model, golden->config, golden->context, golden->queries, {.bf16_operands = true});
  std::map<std::string, const TensorD*> baseline{{"output", &rounded.output}};
  for (size_t k = 0; k < rounded.queries.size(); ++k)
    baseline["query_" + std::to_string(k)] = &rounded.queries[k];
  for (const auto& [tensor_name, t] : rounded.state) baseline[tensor_name] = &t;
  double error = 0, base = 0;
  for (const auto& [tensor_name, want] : golden->expected) {
    ASSERT_TRUE(got->count(tensor_name) && baseline.count(tensor_name)) << tensor_name;
    error = std::max(error, RelativeError(got->at(tensor_name), want));
    base = std::max(base, RelativeError(*baseline.at(tensor_name), want));
  }
  std::printf("bf16 %s: error %.3g, bf16-operand reference %.3g\n", name.c_str(), error, base);
  EXPECT_GT(base, 1e-4) << "rounding to bf16 should cost more than float32 does";
  EXPECT_LE(error, 2 * base);
}

INSTANTIATE_TEST_SUITE_P(Golden, CpuGoldenBf16Test,
                         ::testing::Combine(::testing::ValuesIn(GoldenCaseNames()),
                                            ::testing::Values(4096, 7)));

INSTANTIATE_TEST_SUITE_P(Golden, CpuGoldenTest,
                         ::testing::Combine(::testing::ValuesIn(GoldenCaseNames()),
                                            ::testing::Values(1, 2),
                                            ::testing::Values(4096, 7, 2)));

}  // namespace
}  // namespace lact::testing
