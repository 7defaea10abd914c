// The float64 reference against the independent float64 golden outputs:
// both implement docs/model.md in float64, so they must agree far below 1e-4.
#include <gtest/gtest.h>

#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"

namespace lact::testing {
namespace {

class ReferenceGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceGoldenTest, MatchesExpected) {
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(GetParam());
  ASSERT_TRUE(golden.ok()) << golden.status();
  reference::JobOutputs got =
      reference::RunJob(golden->model, golden->config, golden->context, golden->queries);
  ASSERT_EQ(got.queries.size(), golden->queries.size());
  std::map<std::string, const TensorD*> outputs = {{"output", &got.output}};
  for (size_t k = 0; k < got.queries.size(); ++k)
    outputs["query_" + std::to_string(k)] = &got.queries[k];
  for (const auto& [name, t] : got.state) outputs[name] = &t;
  ASSERT_EQ(outputs.size(), golden->expected.size());
  for (const auto& [name, want] : golden->expected) {
    ASSERT_TRUE(outputs.count(name)) << name;
    EXPECT_LE(RelativeError(*outputs[name], want), 1e-9) << GetParam() << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ReferenceGoldenTest, ::testing::ValuesIn(GoldenCaseNames()));

TEST(GoldenFiles, ArePresent) {
  ASSERT_GE(GoldenCaseNames().size(), 3u)
      << "golden cases not found under " << GoldenDir()
      << "; the tests read ../shared/golden next to the repository";
}

}  // namespace
}  // namespace lact::testing
