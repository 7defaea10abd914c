// A shard's run without a call: the golden cases' contexts read by
// reference and run on the CPU backend as a group of one, their outputs
// written to a file and their fused state kept, checked against the
// golden files; the reports rank 0 makes; a cancel that stops the run.
#include "worker/shard_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/fused_state.h"
#include "common/npy.h"
#include "common/status_macros.h"
#include "tests/golden_case.h"

namespace lact {
namespace {

using ::lact::testing::GoldenCaseNames;
using ::lact::testing::LoadGoldenCase;
using ::lact::testing::RelativeError;
namespace fs = std::filesystem;

class Reports final : public ShardReports {
 public:
  void LayersDone(int layers) override { layers_.push_back(layers); }
  void Spooled() override { ++spooled_; }
  std::vector<int> layers_;
  int spooled_ = 0;
};

class ShardRunTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/lact_shard_run_", getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Rank 0 of 1 over the whole context, both ways by reference; the
  // output file made as the coordinator makes it.
  v1::ShardSpec Spec(const std::string& name, int64_t tokens, int64_t output_width) const {
    EXPECT_TRUE(CreateOutputFile(DataPath::Split(root_ + "/output.npy"), tokens, output_width,
                                 false, nullptr)
                    .ok());
    v1::ShardSpec s;
    s.set_job_id(absl::StrCat("job-", name));
    s.set_rank(0);
    s.set_world_size(1);
    s.set_begin(0);
    s.set_tokens(tokens);
    s.set_total_tokens(tokens);
    s.mutable_context_ref()->set_path("context.npy");
    s.mutable_output_ref()->set_path("output.npy");
    return s;
  }

  // The case (golden_) with its context written by reference, and its
  // shard run with `cancelled`: its ShardDone.
  absl::StatusOr<v1::ShardDone> RunCase(bool cancelled) {
    absl::StatusOr<testing::GoldenCase> loaded = LoadGoldenCase(GetParam());
    if (!loaded.ok()) return loaded.status();
    golden_.emplace(*std::move(loaded));
    testing::GoldenCase* golden = &*golden_;
    LACT_RETURN_IF_ERROR(WriteNpy(root_ + "/context.npy", golden->context));
    spec_ = Spec(GetParam(), golden->context.dim(0), golden->config.output_width());
    ShardPlace place;
    place.data_root = root_;
    place.results = &results_;
    place.store = nullptr;  // a group of one meets no one
    ShardRun run(
        place, spec_, {std::make_shared<const Model>(std::move(golden->model)), golden->config},
        &reports_, [cancelled] { return cancelled; }, nullptr);
    return run.Run();
  }

  std::string root_;
  RetainedResults results_;
  Reports reports_;
  v1::ShardSpec spec_;
  std::optional<testing::GoldenCase> golden_;
};

TEST_P(ShardRunTest, AContextByReferenceMatchesTheGoldenFile) {
  absl::StatusOr<v1::ShardDone> done = RunCase(/*cancelled=*/false);
  ASSERT_TRUE(done.ok()) << done.status();
  absl::StatusOr<Tensor> output = ReadNpy(root_ + "/output.npy");
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_LE(RelativeError(*output, golden_->expected.at("output")), 1e-4);
  absl::StatusOr<RetainedResult> kept = results_.Get(spec_.job_id());
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_NE(kept->state, nullptr) << "rank 0 keeps the fused state";
  for (const auto& [name, tensor] : FusedStateTensors(*kept->state))
    EXPECT_LE(RelativeError(*tensor, golden_->expected.at(name)), 1e-4) << name;
  std::vector<int> every_layer(golden_->config.n_layers);
  for (int i = 0; i < golden_->config.n_layers; ++i) every_layer[i] = i + 1;
  EXPECT_EQ(reports_.layers_, every_layer);
  EXPECT_EQ(done->output_bytes(), output->size() * 4);
  EXPECT_TRUE(done->results_delivered());
}

TEST_P(ShardRunTest, ACancelStopsTheRunAndKeepsNothing) {
  absl::StatusOr<v1::ShardDone> done = RunCase(/*cancelled=*/true);
  EXPECT_EQ(done.status().code(), absl::StatusCode::kCancelled) << done.status();
  EXPECT_FALSE(results_.Get(spec_.job_id()).ok());
}

INSTANTIATE_TEST_SUITE_P(Golden, ShardRunTest, ::testing::ValuesIn(GoldenCaseNames()));

}  // namespace
}  // namespace lact
