// The CUDA runner (fp32, TF32 off) on every golden case and beside the
// float64 reference on random shapes, every tensor within 1e-4. Skipped
// (GTEST_SKIP) where no CUDA device is visible; ctest label `gpu`.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"
#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "worker/cuda_runner.h"

namespace lact::testing {
namespace {

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenTest, MatchesExpected) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(GetParam());
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner = CudaRunner::Create(golden->model, golden->config);
  ASSERT_TRUE(runner.ok()) << runner.status();
  FusedState state;
  absl::StatusOr<Tensor> output = (*runner)->RunContext(golden->context, &state);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_LE(RelativeError(*output, golden->expected.at("output")), 1e-4);
  for (size_t k = 0; k < golden->queries.size(); ++k) {
    absl::StatusOr<Tensor> q = (*runner)->RunQuery(golden->queries[k], state);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_LE(RelativeError(*q, golden->expected.at(absl::StrCat("query_", k))), 1e-4) << k;
  }
  for (const auto& [name, t] : FusedStateTensors(state)) {
    EXPECT_LE(RelativeError(*t, golden->expected.at(name)), 1e-4) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaGoldenTest, ::testing::ValuesIn(GoldenCaseNames()));

struct Shape {
  std::string name;
  int d, layers, d_in, d_out, p, n, w, dh, muon, chunk;
  int64_t tokens;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

class CudaParityTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaParityTest, MatchesFloat64Reference) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Shape& s = GetParam();
  ModelConfig c;
  c.d_model = s.d;
  c.n_layers = s.layers;
  c.d_input = s.d_in;
  c.d_output = s.d_out;
  c.ssm = {2, s.p, s.n, s.w};
  c.ttt = {s.dh, 2, 0.2, s.muon, s.chunk};
  c.mlp_hidden = 3 * s.d;
  Model model = RandomTestModel(c, 11);
  Tensor context = RandomTokens(s.tokens, c.input_width(), 12);
  std::vector<Tensor> queries = {RandomTokens(1, c.input_width(), 13), RandomTokens(7, c.input_width(), 14)};
  reference::JobOutputs want = reference::RunJob(model, c, context, queries);
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner = CudaRunner::Create(model, c);
  ASSERT_TRUE(runner.ok()) << runner.status();
  FusedState state;
  absl::StatusOr<Tensor> output = (*runner)->RunContext(context, &state);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_LE(RelativeError(*output, want.output), 1e-4);
  for (size_t k = 0; k < queries.size(); ++k) {
    absl::StatusOr<Tensor> q = (*runner)->RunQuery(queries[k], state);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_LE(RelativeError(*q, want.queries[k]), 1e-4) << k;
  }
  for (const auto& [name, t] : FusedStateTensors(state)) EXPECT_LE(RelativeError(*t, want.state.at(name)), 1e-4) << name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaParityTest,
                         ::testing::Values(Shape{"one_token", 16, 1, 0, 0, 8, 4, 4, 8, 0, 0, 1},
                                           Shape{"shorter_than_conv", 16, 2, 0, 0, 8, 4, 4, 8, 0, 0, 2},
                                           Shape{"odd_embed_head", 12, 2, 5, 7, 3, 5, 3, 6, 0, 0, 37},
                                           Shape{"chunks_muon", 16, 2, 0, 0, 4, 6, 4, 8, 2, 11, 40},
                                           Shape{"conv_width_one", 8, 1, 0, 3, 4, 4, 1, 4, 0, 5, 13},
                                           Shape{"long", 32, 1, 0, 0, 8, 16, 4, 16, 0, 64, 300},
                                           Shape{"head_wider_than_model", 8, 1, 6, 20, 4, 4, 4, 4, 0, 0, 9}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lact::testing
