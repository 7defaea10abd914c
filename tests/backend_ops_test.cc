// Every operation of BackendOps (worker/schedule/backend_ops.h) on every
// backend, one at a time, from identical inputs: the CUDA backend (on a GPU,
// or on tools/cuda-emu) against the CPU backend, which the golden and
// parity suites check against the float64 reference. What ggml's
// test-backend-ops does for its graph ops, for the ops of our one schedule.
// Tolerance: fp32 on both sides, every result within 1e-4 relative.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "worker/cpu/cpu_ops.h"
#include "worker/cuda/cuda_ops.h"
#include "worker/cuda/device_weights.h"

namespace lact::testing {
namespace {

constexpr double kTolerance = 1e-4;

// A small model with an embedding and a head, two TTT heads, four SSM heads.
ModelConfig OpsConfig(int muon_steps) {
  return {.d_model = 32,
          .n_layers = 1,
          .d_input = 24,
          .d_output = 20,
          .ssm = {.head_dim = 16, .d_state = 8},
          .ttt = {.head_dim = 16, .muon_steps = muon_steps},
          .mlp_hidden = 48};
}

Tensor Random(std::vector<int64_t> shape, uint64_t seed) {
  int64_t size = 1;
  for (int64_t d : shape) size *= d;
  Tensor flat = RandomTokens(size, 1, seed);
  flat.shape = std::move(shape);
  return flat;
}

// One backend's ops over a sequence, with what they need kept alive.
struct Backend {
  std::string name;
  std::unique_ptr<cuda::CudaContext> ctx;
  std::shared_ptr<const DeviceWeights> weights;
  OverlapStats stats;
  std::unique_ptr<BackendOps> ops;
};

class BackendOpsTest : public ::testing::TestWithParam<int> {
 protected:
  static constexpr int64_t kTokens = 45, kTile = 16;

  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    config_ = OpsConfig(GetParam());
    model_ = std::make_unique<Model>(RandomTestModel(config_, 7));
    auto cpu = std::make_unique<Backend>();
    cpu->name = "cpu";
    cpu->ops = std::make_unique<CpuOps>(*model_, config_, kTokens, kTile, nullptr, &cpu->stats);
    backends_.push_back(std::move(cpu));
    auto gpu = std::make_unique<Backend>();
    gpu->name = "cuda";
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    gpu->ctx = *std::move(ctx);
    absl::StatusOr<std::shared_ptr<const DeviceWeights>> weights =
        DeviceWeights::Upload(*model_, *gpu->ctx);
    ASSERT_TRUE(weights.ok()) << weights.status();
    gpu->weights = *std::move(weights);
    absl::StatusOr<std::unique_ptr<CudaOps>> ops =
        CudaOps::Create(*model_, config_, *gpu->ctx, *gpu->weights, kTokens, kTile, nullptr);
    ASSERT_TRUE(ops.ok()) << ops.status();
    gpu->ops = *std::move(ops);
    backends_.push_back(std::move(gpu));
    for (auto& b : backends_) {
      ASSERT_TRUE(b->ops->LoadTokens(RandomTokens(kTokens, config_.d_input, 11)).ok()) << b->name;
    }
  }

  // Runs `op` on every backend; OK expected everywhere.
  void OnEach(const std::function<absl::Status(BackendOps&)>& op) {
    for (auto& b : backends_) {
      const absl::Status s = op(*b->ops);
      ASSERT_TRUE(s.ok()) << b->name << ": " << s;
    }
  }

  // `read` on every backend; each result against the CPU backend's.
  void ExpectSame(const std::string& what, const std::function<Tensor(BackendOps&)>& read) {
    const Tensor want = read(*backends_[0]->ops);
    double scale = 0;
    for (float v : want.data) scale = std::max<double>(scale, std::abs(v));
    ASSERT_GT(scale, 0) << what << " is all zeros on the CPU: the comparison would prove nothing";
    for (size_t i = 1; i < backends_.size(); ++i) {
      EXPECT_LE(RelativeError(read(*backends_[i]->ops), want), kTolerance)
          << what << " on " << backends_[i]->name;
    }
  }

  Tensor Rows(BackendOps& ops, Activation a) {
    Tensor t({kTokens, config_.d_model});
    EXPECT_TRUE(ops.ReadRows(a, 0, kTokens, t.ptr()).ok());
    return t;
  }

  // A scan state with every entry set, so that carry-in paths are exercised.
  MambaState RandomScanState(uint64_t seed) {
    MambaState s = ZeroFusedState(config_).layers[0].mamba[kForward];
    s.ssm = Random(s.ssm.shape, seed);
    s.conv = Random(s.conv.shape, seed + 1);
    return s;
  }

  const LayerWeights& w() const { return model_->layer(0); }

  ModelConfig config_;
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<Backend>> backends_;
};

TEST_P(BackendOpsTest, EmbeddingAndOutput) {
  ExpectSame("x after LoadTokens",
             [&](BackendOps& ops) { return Rows(ops, Activation::kResidual); });
  // In two pieces, as the last block makes them: a ragged split.
  ExpectSame("OutputRows", [&](BackendOps& ops) {
    const int64_t width = config_.output_width(), split = kTokens / 3;
    Tensor out({kTokens, width});
    EXPECT_TRUE(ops.OutputRows(0, split, out.ptr()).ok());
    EXPECT_TRUE(ops.OutputRows(split, kTokens - split, out.ptr() + split * width).ok());
    return out;
  });
}

TEST_P(BackendOpsTest, BeginBlock) {
  OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
  ExpectSame("h", [&](BackendOps& ops) { return Rows(ops, Activation::kNormed); });
}

// Both directions with outputs in one block, in either order (rank 0 and
// rank 1 of two run them so), over uneven tiles that differ between the
// directions: acc after both (a backend may hold the first's outputs).
TEST_P(BackendOpsTest, MixerOutputsOfBothDirections) {
  const std::pair<int64_t, int64_t> forward[] = {{0, 16}, {16, 16}, {32, 13}};
  const std::pair<int64_t, int64_t> backward[] = {{29, 16}, {13, 16}, {0, 13}};
  for (Direction first : {kForward, kBackward}) {
    OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
    for (Direction dir : {first, first == kForward ? kBackward : kForward}) {
      OnEach([&](BackendOps& ops) { return ops.LoadScanState(RandomScanState(21 + dir)); });
      for (auto [row, n] : dir == kForward ? forward : backward) {
        OnEach([&](BackendOps& ops) { return ops.MixerTile(w(), dir, row, n, true, false); });
      }
    }
    ExpectSame(absl::StrCat(first == kForward ? "forward" : "backward", " first: acc"),
               [&](BackendOps& ops) { return Rows(ops, Activation::kMixed); });
  }
}

// Each direction, outputs on and off, summarized or not, over uneven tiles:
// the states and decay it leaves.
TEST_P(BackendOpsTest, MixerTiles) {
  const std::pair<int64_t, int64_t> tiles[] = {{0, 16}, {16, 16}, {32, 13}};
  for (Direction dir : {kForward, kBackward}) {
    for (bool outputs : {true, false}) {
      const std::string what = absl::StrCat(dir == kForward ? "forward" : "backward",
                                            outputs ? " with outputs" : " state only");
      OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
      OnEach([&](BackendOps& ops) { return ops.LoadScanState(RandomScanState(21 + dir)); });
      for (auto [first, n] : tiles) {
        OnEach([&](BackendOps& ops) { return ops.MixerTile(w(), dir, first, n, outputs, true); });
      }
      MambaState shape = RandomScanState(0);
      ExpectSame(what + ": ssm state", [&](BackendOps& ops) {
        MambaState s = shape;
        EXPECT_TRUE(ops.StoreScanState(&s, nullptr).ok());
        return s.ssm;
      });
      ExpectSame(what + ": conv history", [&](BackendOps& ops) {
        MambaState s = shape;
        EXPECT_TRUE(ops.StoreScanState(&s, nullptr).ok());
        return s.conv;
      });
      ExpectSame(what + ": log decay", [&](BackendOps& ops) {
        MambaState s = shape;
        Tensor decay({config_.ssm_heads()});
        EXPECT_TRUE(ops.StoreScanState(&s, decay.ptr()).ok());
        return decay;
      });
    }
  }
}

// The gradients over two tiles, the update (with Muon when the case has it),
// then the updated weights applied to a third tile.
TEST_P(BackendOpsTest, FastWeightUpdateAndApply) {
  OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
  OnEach([&](BackendOps& ops) { return ops.LoadFastWeights(w(), nullptr); });
  OnEach([&](BackendOps& ops) { return ops.ZeroGrads(); });
  OnEach([&](BackendOps& ops) { return ops.AccumulateGrads(w(), 0, 16); });
  OnEach([&](BackendOps& ops) { return ops.AccumulateGrads(w(), 16, 11); });
  OnEach([&](BackendOps& ops) { return ops.UpdateFastWeights(w()); });
  const LayerState zero = ZeroFusedState(config_).layers[0];
  for (const char* name : {"w0", "w1", "w2"}) {
    ExpectSame(absl::StrCat("updated ", name), [&](BackendOps& ops) {
      LayerState s = zero;
      EXPECT_TRUE(ops.StoreFastWeights(&s).ok());
      return name[1] == '0' ? s.w0 : name[1] == '1' ? s.w1 : s.w2;
    });
  }
  OnEach([&](BackendOps& ops) { return ops.ApplyFastWeights(w(), 27, 16); });
  ExpectSame("acc after apply", [&](BackendOps& ops) { return Rows(ops, Activation::kMixed); });
}

// Retained fast weights (a query's): loaded, applied, stored back unchanged.
TEST_P(BackendOpsTest, RetainedFastWeights) {
  LayerState retained = ZeroFusedState(config_).layers[0];
  retained.w0 = Random(retained.w0.shape, 31);
  retained.w1 = Random(retained.w1.shape, 32);
  retained.w2 = Random(retained.w2.shape, 33);
  OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
  OnEach([&](BackendOps& ops) { return ops.LoadFastWeights(w(), &retained); });
  OnEach([&](BackendOps& ops) { return ops.ApplyFastWeights(w(), 0, 16); });
  ExpectSame("acc after apply", [&](BackendOps& ops) { return Rows(ops, Activation::kMixed); });
  for (auto& b : backends_) {
    LayerState s = ZeroFusedState(config_).layers[0];
    ASSERT_TRUE(b->ops->StoreFastWeights(&s).ok());
    EXPECT_EQ(s.w1.data, retained.w1.data) << b->name;
  }
}

TEST_P(BackendOpsTest, ResidualMlp) {
  OnEach([&](BackendOps& ops) { return ops.BeginBlock(w()); });
  OnEach([&](BackendOps& ops) { return ops.LoadScanState(RandomScanState(41)); });
  for (Direction dir : {kForward, kBackward}) {
    OnEach([&](BackendOps& ops) { return ops.MixerTile(w(), dir, 0, 16, true, false); });
  }
  OnEach([&](BackendOps& ops) { return ops.ResidualMlp(w(), 0, 16); });
  OnEach([&](BackendOps& ops) { return ops.ResidualMlp(w(), 16, 7); });
  OnEach([&](BackendOps& ops) { return ops.Sync(); });
  ExpectSame("x", [&](BackendOps& ops) { return Rows(ops, Activation::kResidual); });
}

INSTANTIATE_TEST_SUITE_P(Muon, BackendOpsTest, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("muon", info.param);
                         });

}  // namespace
}  // namespace lact::testing
