// Randomized parity: the float32 CPU runner beside the float64 reference
// over many model shapes and job options (odd sizes, L = 1, L < W, chunks
// that do and do not divide L, Muon on and off, query sets of one token,
// tiles shorter than the conv width), every tensor within 1e-4.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"
#include "tests/parity_cases.h"
#include "tests/random_model.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

class CpuParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(CpuParityTest, MatchesFloat64Reference) {
  const ParityCase& pc = GetParam();
  Model model = RandomTestModel(pc.config, 7);
  Tensor context = RandomTokens(pc.context_tokens, pc.config.input_width(), 1);
  std::vector<Tensor> queries;
  for (size_t k = 0; k < pc.query_tokens.size(); ++k) {
    queries.push_back(RandomTokens(pc.query_tokens[k], pc.config.input_width(), 100 + k));
  }
  reference::JobOutputs want = reference::RunJob(model, pc.config, context, queries);

  CpuRunner runner(model, pc.config, {.threads = pc.threads, .tile_tokens = pc.tile});
  FusedState state;
  absl::StatusOr<Tensor> output = runner.RunContext(context, &state);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_LE(RelativeError(*output, want.output), 1e-4) << "output";
  for (size_t k = 0; k < queries.size(); ++k) {
    absl::StatusOr<Tensor> q = runner.RunQuery(queries[k], state);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_LE(RelativeError(*q, want.queries[k]), 1e-4) << "query " << k;
  }
  for (const auto& [name, t] : FusedStateTensors(state)) {
    ASSERT_TRUE(want.state.count(name)) << name;
    EXPECT_LE(RelativeError(*t, want.state.at(name)), 1e-4) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuParityTest, ::testing::ValuesIn(FixedParityCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RandomShapes, CpuParityTest, ::testing::ValuesIn(RandomParityCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lact::testing
