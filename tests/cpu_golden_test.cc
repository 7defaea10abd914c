// The float32 CPU runner against the float64 golden files (SPEC.md, every
// tensor within max|got-want|/max|want| <= 1e-4), for several thread counts
// and tile sizes (a tile shorter than the conv width included).
#include <gtest/gtest.h>

#include <tuple>

#include "tests/golden_case.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

constexpr double kTolerance = 1e-4;

class CpuGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(CpuGoldenTest, MatchesExpected) {
  const auto& [name, threads, tile] = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  CpuRunner runner(golden->model, golden->config, {.threads = threads, .tile_tokens = tile});
  FusedState state;
  absl::StatusOr<Tensor> output = runner.RunContext(golden->context, &state);
  ASSERT_TRUE(output.ok()) << output.status();
  std::map<std::string, Tensor> got;
  got["output"] = *std::move(output);
  for (size_t k = 0; k < golden->queries.size(); ++k) {
    absl::StatusOr<Tensor> q = runner.RunQuery(golden->queries[k], state);
    ASSERT_TRUE(q.ok()) << q.status();
    got["query_" + std::to_string(k)] = *std::move(q);
  }
  for (const auto& [tensor_name, t] : FusedStateTensors(state)) got[tensor_name] = *t;
  ASSERT_EQ(got.size(), golden->expected.size());
  for (const auto& [tensor_name, want] : golden->expected) {
    ASSERT_TRUE(got.count(tensor_name)) << tensor_name;
    const double err = RelativeError(got[tensor_name], want);
    EXPECT_LE(err, kTolerance) << name << " " << tensor_name;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CpuGoldenTest,
                         ::testing::Combine(::testing::ValuesIn(GoldenCaseNames()),
                                            ::testing::Values(1, 2),
                                            ::testing::Values(4096, 7, 2)));

}  // namespace
}  // namespace lact::testing
