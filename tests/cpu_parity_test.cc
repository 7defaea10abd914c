// Randomized parity: the float32 CPU runner beside the float64 reference
// over many model shapes and job options (odd sizes, L = 1, L < W, chunks
// that do and do not divide L, Muon on and off, query sets of one token,
// tiles shorter than the conv width), every tensor within 1e-4; and the
// CPU's bf16 mode over the same shapes, within twice the error of the
// float64 reference run on bf16-rounded GEMM operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"
#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"
#include "tests/parity_cases.h"
#include "tests/random_model.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

class CpuParityTest : public ::testing::TestWithParam<ParityCase> {};

// A job's outputs from the CPU runner, as reference::JobOutputs in float32.
struct Outputs {
  Tensor output;
  std::vector<Tensor> queries;
  std::map<std::string, Tensor> state;
};

absl::StatusOr<Outputs> RunOnCpu(const ParityJob& job, const ParityCase& pc,
                                 const std::string& precision) {
  CpuRunner runner(job.model, pc.config,
                   {.threads = pc.threads, .tile_tokens = pc.tile, .precision = precision});
  FusedState state;
  Outputs got;
  LACT_ASSIGN_OR_RETURN(got.output, runner.RunContext(job.context, &state));
  for (const Tensor& query : job.queries) {
    LACT_ASSIGN_OR_RETURN(Tensor q, runner.RunQuery(query, state));
    got.queries.push_back(std::move(q));
  }
  for (const auto& [name, t] : FusedStateTensors(state)) got.state[name] = *t;
  return got;
}

TEST(RoundToBFloat16, RoundsToNearestTiesToEven) {
  const auto bits = [](uint32_t b) { return std::bit_cast<float>(b); };
  EXPECT_EQ(RoundToBFloat16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBFloat16(bits(0x3f808000u)), bits(0x3f800000u));  // tie: to the even 0x3f80
  EXPECT_EQ(RoundToBFloat16(bits(0x3f818000u)), bits(0x3f820000u));  // tie: to the even 0x3f82
  EXPECT_EQ(RoundToBFloat16(bits(0x3f808001u)), bits(0x3f810000u));  // above the tie: up
  EXPECT_EQ(RoundToBFloat16(bits(0xbf807fffu)), bits(0xbf800000u));  // below the tie: down
  EXPECT_EQ(RoundToBFloat16(bits(0x7f7fffffu)), bits(0x7f800000u));  // FLT_MAX rounds to inf
}

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

// The GEMM weights rounded, everything else as it was; one copy per live
// shared model, a new one for a new model.
TEST(SharedBf16Weights, RoundsGemmWeightsOncePerModel) {
  const ModelConfig config = FixedParityCases()[2].config;
  auto model = std::make_shared<const Model>(RandomTestModel(config, 7));
  absl::StatusOr<std::shared_ptr<const Model>> first = SharedBf16Weights(model);
  ASSERT_TRUE(first.ok()) << first.status();
  const Tensor& in_proj = model->tensors().at("layers.0.mamba.fwd.in_proj.weight");
  const Tensor& rounded = (*first)->tensors().at("layers.0.mamba.fwd.in_proj.weight");
  int changed = 0;
  for (int64_t i = 0; i < in_proj.size(); ++i) {
    EXPECT_EQ(rounded.data[i], RoundToBFloat16(in_proj.data[i])) << i;
    changed += rounded.data[i] != in_proj.data[i];
  }
  EXPECT_GT(changed, in_proj.size() / 2) << "random weights are rarely bf16 already";
  for (const char* kept : {"layers.0.norm1.weight", "layers.0.ttt.w0", "layers.0.mamba.fwd.A_log",
                           "layers.0.mamba.fwd.conv1d.weight", "layers.0.ttt.lr.bias"}) {
    EXPECT_EQ((*first)->tensors().at(kept).data, model->tensors().at(kept).data) << kept;
  }
  absl::StatusOr<std::shared_ptr<const Model>> again = SharedBf16Weights(model);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), first->get()) << "made once per model";

  const std::shared_ptr<const Model> kept_copy = *first;
  model.reset();
  auto other = std::make_shared<const Model>(RandomTestModel(config, 8));
  absl::StatusOr<std::shared_ptr<const Model>> second = SharedBf16Weights(other);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->get(), kept_copy.get());
  EXPECT_EQ((*second)->tensors().at("layers.0.mamba.fwd.in_proj.weight").data[0],
            RoundToBFloat16(other->tensors().at("layers.0.mamba.fwd.in_proj.weight").data[0]));
}

// The bf16 mode (GEMM operands rounded to bf16, float32 accumulation):
// its error against the exact float64 reference is at most twice that of
// the float64 reference run with every GEMM operand rounded to bf16, and it
// is nearer to that rounded run than to the exact one (it rounds; a mode
// that computed in float32 would be nearer the exact run). It runs on the
// CPU's bf16 matmul where there is one (cpu::Bf16MatmulOn()), emulated
// otherwise; ExpectBf16Parity checks whichever is on.
void ExpectBf16Parity(const ParityCase& pc) {
  const ParityJob job = MakeParityJob(pc);
  const ReferenceRuns references = RunReferences(job, pc.config, {.bf16_operands = true});
  const reference::JobOutputs &want = references.exact, &rounded = references.bf16;
  absl::StatusOr<Outputs> got = RunOnCpu(job, pc, "bf16");
  ASSERT_TRUE(got.ok()) << got.status();
  const double baseline = JobError(rounded, want), error = JobError(*got, want);
  const double to_rounded = JobError(*got, rounded);
  std::printf("bf16 %s: error %.3g, bf16-operand reference %.3g (ratio %.2f), to it %.3g\n",
              pc.name.c_str(), error, baseline, error / baseline, to_rounded);
  EXPECT_LE(error, 2 * baseline);
  EXPECT_LT(to_rounded, 0.25 * error);
}

TEST_P(CpuParityTest, Bf16WithinTwiceTheErrorOfBf16RoundedOperands) {
  std::printf("bf16 mode: %s\n", CpuBf16Mode().c_str());
  ExpectBf16Parity(GetParam());
}

// Both ways of running the bf16 mode, whichever this CPU defaults to: the
// emulation (sgemm on the rounded operands) and, where the CPU has bf16
// units, the bf16 matmul.
TEST(CpuBf16Modes, EachWithinTwiceTheErrorOfBf16RoundedOperands) {
  const bool was_on = cpu::Bf16MatmulOn();
  const absl::Cleanup restore = [was_on] { cpu::SetBf16Matmul(was_on); };
  for (const bool matmul : {false, true}) {
    if (matmul && !cpu::HasBf16Matmul()) {
      std::printf("no bf16 matmul here: %s\n", cpu::Bf16MatmulKernel().c_str());
      continue;
    }
    cpu::SetBf16Matmul(matmul);
    ASSERT_EQ(cpu::Bf16MatmulOn(), matmul);
    for (const ParityCase& pc :
         {FixedParityCases()[2], FixedParityCases()[3], RandomParityCases()[5]}) {
      SCOPED_TRACE(pc.name + (matmul ? ", bf16 matmul" : ", emulated"));
      ExpectBf16Parity(pc);
    }
  }
}

// Rows split among threads: each row in exactly one slice, slices in row
// order on distinct threads, none shorter than asked; one slice, on the
// caller, where the rows are too few.
TEST(ForRowSlices, SplitsRowsOneSlicePerThread) {
  cpu::SetNumThreads(3);
  for (const auto& [rows, want] :
       std::vector<std::pair<int64_t, int>>{{1000, 3}, {600, 2}, {511, 1}, {3, 1}, {0, 1}}) {
    std::vector<int> slot_of(rows, -1);
    std::vector<std::thread::id> thread_of(3);
    std::vector<int64_t> sizes(3, 0);
    int nested = 0;
    const int slices = cpu::ForRowSlices(rows, 256, [&](int64_t begin, int64_t n, int slot) {
      for (int64_t i = begin; i < begin + n; ++i) slot_of[i] = slot;
      thread_of[slot] = std::this_thread::get_id();
      sizes[slot] = n;
      if (slot == 0) nested = cpu::ForRowSlices(1000, 1, [](int64_t, int64_t, int) {});
    });
    EXPECT_EQ(slices, want) << rows << " rows";
    // A slice on a thread of its own does not split again; one run on the
    // caller may.
    EXPECT_EQ(nested, want > 1 ? 1 : 3) << rows << " rows";
    for (int64_t i = 1; i < rows; ++i) EXPECT_LE(slot_of[i - 1], slot_of[i]) << i;
    for (int64_t i = 0; i < rows; ++i) ASSERT_GE(slot_of[i], 0) << "row " << i << " not run";
    if (rows > 0) {
      EXPECT_EQ(slot_of[rows - 1], want - 1);
    }
    if (want > 1) {
      EXPECT_EQ(std::set<std::thread::id>(thread_of.begin(), thread_of.begin() + want).size(),
                static_cast<size_t>(want));
      for (int s = 0; s < want; ++s) EXPECT_GE(sizes[s], 256) << "slice " << s;
    }
  }
  cpu::SetNumThreads(0);
}

// Work split among threads: tiles long enough that the LaCT update and
// apply and the MLP split their rows (at least 256 rows a slice), with 2
// and 3 threads, 1,024-token tiles and a ragged last one, an embedding and
// a head, chunks that end inside a tile (an update's rows are a chunk's
// part of a tile); and one scan head for 3 threads (two of the scan's
// threads have no head of their own).
std::vector<ParityCase> RowSliceCases() {
  const ModelConfig embedded = FixedParityCases()[2].config;
  ModelConfig chunked = FixedParityCases()[3].config;
  chunked.ttt.chunk_tokens = 800;  // 800 + 300: the first chunk's update in three slices
  ModelConfig one_head = FixedParityCases()[7].config;
  one_head.ssm.head_dim = one_head.d_inner();
  return {{"two_slices", embedded, 1300, {600}, 1024, 2},
          {"three_slices_chunked", chunked, 1100, {800}, 1024, 3},
          {"one_scan_head_three_threads", one_head, 150, {70}, 4096, 3}};
}

INSTANTIATE_TEST_SUITE_P(RowSlices, CpuParityTest, ::testing::ValuesIn(RowSliceCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Shapes, CpuParityTest, ::testing::ValuesIn(FixedParityCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(UpdateRules, CpuParityTest,
                         ::testing::ValuesIn(UpdateRuleParityCases(/*bf16_newton_schulz=*/true)),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RandomShapes, CpuParityTest, ::testing::ValuesIn(RandomParityCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lact::testing
