#include "worker/schedule/stage_profile.h"

#include <cstring>

#include "gtest/gtest.h"
#include "tests/parity_cases.h"
#include "tests/random_model.h"
#include "worker/cpu/cpu_runner.h"

namespace lact {
namespace {

// A profiled run computes what an unprofiled one does, bit for bit, and
// counts every stage's rows once per layer: the mixers, LaCT's gradients
// and application and the residual MLP each see the context's rows.
TEST(StageProfile, CountsEachStagesRowsPerLayerAndChangesNothing) {
  const testing::ParityCase pc = testing::FixedParityCases()[2];  // odd sizes, 2 layers
  const Model model = testing::RandomTestModel(pc.config, 7);
  const int64_t L = 37, tile = 8;
  const BackendOptions options{.threads = 1, .tile_tokens = tile};
  FusedState plain_state, profiled_state;
  CpuRunner plain(model, pc.config, options);
  absl::StatusOr<Tensor> want =
      plain.RunContext(testing::RandomTokens(L, pc.config.input_width(), 1), &plain_state);
  ASSERT_TRUE(want.ok()) << want.status();

  StageProfile profile;
  RunHooks hooks;
  hooks.profile = &profile;
  CpuRunner profiled(model, pc.config, options, hooks);
  absl::StatusOr<Tensor> got =
      profiled.RunContext(testing::RandomTokens(L, pc.config.input_width(), 1), &profiled_state);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->data.size(), want->data.size());
  EXPECT_EQ(std::memcmp(got->ptr(), want->ptr(), want->data.size() * sizeof(float)), 0);

  ASSERT_EQ(profile.layers(), pc.config.n_layers);
  for (int layer = 0; layer < profile.layers(); ++layer) {
    for (Stage s : {Stage::kMixerFwd, Stage::kMixerBwd, Stage::kLactGrads, Stage::kLactApply,
                    Stage::kResidualMlp}) {
      EXPECT_EQ(profile.At(layer, s).rows, L) << StageName(s) << " layer " << layer;
      EXPECT_GT(profile.At(layer, s).seconds, 0) << StageName(s);
    }
    EXPECT_EQ(profile.At(layer, Stage::kMixerFwd).calls, (L + tile - 1) / tile);
    EXPECT_EQ(profile.At(layer, Stage::kBlockNorm).calls, 1);
  }
  EXPECT_EQ(profile.At(-1, Stage::kLoadTokens).calls, 1);
  EXPECT_EQ(profile.Total(Stage::kMixerSummary).calls, 0);  // a group of one sends no summary
  EXPECT_GE(profile.TotalSeconds(), profile.Total(Stage::kResidualMlp).seconds);
}

}  // namespace
}  // namespace lact
