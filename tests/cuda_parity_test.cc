// The CUDA runner beside the oracles (ctest label `gpu`; every test skips
// with GTEST_SKIP where no CUDA device is visible):
//  - fp32 (TF32 off): every golden case, through one runner and through two
//    or three runners sharing the GPU as the ranks of a Gloo group (threads
//    of this process, gradient all-reduce staged through the host), and the
//    CPU parity suite's whole shape sweep against the float64 reference,
//    every tensor within 1e-4;
//  - bf16 (bf16 GEMM operands, fp32 accumulation and state, the
//    intermediate products bf16): the error against the float64 reference
//    within 2x the error of the reference itself evaluated with every GEMM
//    input and those products rounded to bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ssd_scan_bf16.h"
#include "kernels/reference/reference_model.h"
#include "tests/gloo_ranks.h"
#include "tests/golden_case.h"
#include "tests/parity_cases.h"
#include "tests/random_model.h"
#include "worker/collective/host_staged_allreduce.h"
#include "worker/cuda/cuda_runner.h"

namespace lact::testing {
namespace {

#define LACT_SKIP_WITHOUT_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

Tensor Rows(const Tensor& t, int64_t begin, int64_t count) {
  Tensor out({count, t.dim(1)});
  std::copy_n(t.ptr() + begin * t.dim(1), count * t.dim(1), out.ptr());
  return out;
}

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenTest, MatchesExpected) {
  LACT_SKIP_WITHOUT_GPU();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(GetParam());
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner =
      CudaRunner::Create(golden->model, golden->config);
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

struct GoldenSplit {
  std::string name;
  std::vector<int64_t> lengths;
  int64_t tile;
};

void PrintTo(const GoldenSplit& s, std::ostream* os) {
  *os << s.name << " [" << absl::StrJoin(s.lengths, ",") << "] tile " << s.tile;
}

class CudaDistributedGoldenTest : public ::testing::TestWithParam<GoldenSplit> {};

// A golden case's context run over a split: the output rows in order and
// each rank's fused state.
struct SplitRun {
  Tensor output;
  std::vector<FusedState> states;
};

// Ranks as threads, each with its own CudaRunner on device 0 and its own
// Gloo contexts over 127.0.0.1.
void RunSplit(const GoldenCase& golden, const GoldenSplit& split, const std::string& precision,
              SplitRun* run) {
  const int ranks = static_cast<int>(split.lengths.size());
  const int64_t total = golden.context.dim(0), width = golden.config.output_width();
  std::vector<int64_t> begins(ranks, 0);
  for (int r = 1; r < ranks; ++r) begins[r] = begins[r - 1] + split.lengths[r - 1];
  std::vector<Tensor> outputs(ranks);
  run->states.assign(ranks, FusedState{});
  const std::vector<absl::Status> statuses = RunGlooRanks(ranks, [&](int r, Collective* sync,
                                                                     Collective* grads) {
    BackendOptions options{.backend = "cuda", .tile_tokens = split.tile, .precision = precision};
    auto runner = CudaRunner::Create(golden.model, golden.config, options);
    if (!runner.ok()) return runner.status();
    HostStagedAllReduce reduce(grads);
    auto out = (*runner)->RunContextShard(Rows(golden.context, begins[r], split.lengths[r]),
                                          begins[r], total, sync, &reduce, &run->states[r]);
    if (out.ok()) outputs[r] = *std::move(out);
    return out.status();
  });
  run->output = Tensor({total, width});
  int64_t row = 0;
  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    std::copy(outputs[r].data.begin(), outputs[r].data.end(), run->output.ptr() + row * width);
    row += split.lengths[r];
  }
}

// The largest relative error of a split's output and every rank's state
// against the golden case's float64 tensors.
double SplitError(const SplitRun& run, const std::map<std::string, TensorD>& expected) {
  double worst = RelativeError(run.output, expected.at("output"));
  for (const FusedState& s : run.states) {
    for (const auto& [name, t] : FusedStateTensors(s)) {
      worst = std::max(worst, RelativeError(*t, expected.at(name)));
    }
  }
  return worst;
}

TEST_P(CudaDistributedGoldenTest, MatchesExpected) {
  LACT_SKIP_WITHOUT_GPU();
  const GoldenSplit& split = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(split.name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  SplitRun run;
  ASSERT_NO_FATAL_FAILURE(RunSplit(*golden, split, "fp32", &run));
  EXPECT_LE(RelativeError(run.output, golden->expected.at("output")), 1e-4);
  for (size_t r = 0; r < run.states.size(); ++r) {
    for (const auto& [name, t] : FusedStateTensors(run.states[r])) {
      EXPECT_LE(RelativeError(*t, golden->expected.at(name)), 1e-4) << "rank " << r << " " << name;
    }
  }
}

// bf16 precision, with its default scan, over the same splits, where each
// rank meets the two BiMamba directions' output passes in its own order
// (the first rank's forward first, the last rank's backward first) and
// holds the first for the one out_proj of their sum: within twice the
// error of the float64 reference rounded the same way.
TEST_P(CudaDistributedGoldenTest, Bf16WithinTwiceTheErrorOfItsReference) {
  LACT_SKIP_WITHOUT_GPU();
  const GoldenSplit& split = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(split.name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  SplitRun run;
  ASSERT_NO_FATAL_FAILURE(RunSplit(*golden, split, "bf16", &run));
  absl::StatusOr<cuda::SsdMath> scan = ScanMathFor("", cuda::Precision::kBf16, golden->config);
  ASSERT_TRUE(scan.ok()) << scan.status();
  const reference::JobOutputs rounded =
      reference::RunJob(golden->model, golden->config, golden->context, {},
                        {.bf16_operands = true,
                         .bf16_activations = true,
                         .bf16_scan = *scan == cuda::SsdMath::kBf16});
  double baseline = RelativeError(rounded.output, golden->expected.at("output"));
  for (const auto& [name, t] : rounded.state) {
    baseline = std::max(baseline, RelativeError(t, golden->expected.at(name)));
  }
  const double error = SplitError(run, golden->expected);
  std::printf("bf16 %s over %zu ranks: error %.3g, reference %.3g, ratio %.2f\n",
              split.name.c_str(), run.states.size(), error, baseline, error / baseline);
  EXPECT_LE(error, 2 * baseline);
}

INSTANTIATE_TEST_SUITE_P(Splits, CudaDistributedGoldenTest,
                         ::testing::Values(GoldenSplit{"tiny", {18, 19}, 65536},
                                           GoldenSplit{"tiny", {1, 35, 1}, 4},
                                           GoldenSplit{"tiny_embed_chunked_muon", {30, 34}, 65536},
                                           GoldenSplit{"tiny_embed_chunked_muon", {20, 5, 39}, 7},
                                           GoldenSplit{"tiny_job_overrides", {14, 15}, 65536}));

struct Outputs {
  Tensor output;
  std::vector<Tensor> queries;
  FusedState state;
};

absl::StatusOr<Outputs> RunOnGpu(const Model& model, const ModelConfig& config,
                                 const Tensor& context, const std::vector<Tensor>& queries,
                                 cuda::Precision precision, int64_t tile,
                                 const std::string& scan_math = "fp32") {
  BackendOptions options{
      .backend = "cuda", .tile_tokens = tile, .precision = cuda::PrecisionName(precision)};
  options.scan_math = scan_math;
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner = CudaRunner::Create(model, config, options);
  if (!runner.ok()) return runner.status();
  Outputs out;
  absl::StatusOr<Tensor> output = (*runner)->RunContext(context, &out.state);
  if (!output.ok()) return output.status();
  out.output = *std::move(output);
  for (const Tensor& q : queries) {
    absl::StatusOr<Tensor> got = (*runner)->RunQuery(q, out.state);
    if (!got.ok()) return got.status();
    out.queries.push_back(*std::move(got));
  }
  return out;
}

class CudaParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(CudaParityTest, Fp32MatchesFloat64Reference) {
  LACT_SKIP_WITHOUT_GPU();
  const ParityCase& pc = GetParam();
  const ParityJob job = MakeParityJob(pc);
  reference::JobOutputs want = reference::RunJob(job.model, pc.config, job.context, job.queries);
  absl::StatusOr<Outputs> got =
      RunOnGpu(job.model, pc.config, job.context, job.queries, cuda::Precision::kFp32, pc.tile);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(RelativeError(got->output, want.output), 1e-4) << "output";
  for (size_t k = 0; k < job.queries.size(); ++k) {
    EXPECT_LE(RelativeError(got->queries[k], want.queries[k]), 1e-4) << "query " << k;
  }
  for (const auto& [name, t] : FusedStateTensors(got->state)) {
    EXPECT_LE(RelativeError(*t, want.state.at(name)), 1e-4) << name;
  }
}

// The SSD scan's products on the tensor cores (3xTF32) keep fp32's bound
// through the whole model: odd sizes, a scan of several chunks, tiles of 3.
TEST(CudaRunner, TensorCoreScanMatchesFloat64Reference) {
  LACT_SKIP_WITHOUT_GPU();
  for (const ParityCase& pc : FixedParityCases()) {
    if (pc.name != "odd_sizes" && pc.name != "long_scan_chunks" && pc.name != "tiny_tiles") {
      continue;
    }
    const ParityJob job = MakeParityJob(pc);
    const reference::JobOutputs want =
        reference::RunJob(job.model, pc.config, job.context, job.queries);
    absl::StatusOr<Outputs> got = RunOnGpu(job.model, pc.config, job.context, job.queries,
                                           cuda::Precision::kFp32, pc.tile, "tf32x3");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(RelativeError(got->output, want.output), 1e-4) << pc.name << " output";
    for (const auto& [name, t] : FusedStateTensors(got->state)) {
      EXPECT_LE(RelativeError(*t, want.state.at(name)), 1e-4) << pc.name << " " << name;
    }
  }
}

// The largest relative error over a job's tensors (output, queries, state).
using testing::JobError;  // the shared one, for reference outputs

double JobError(const Outputs& got, const reference::JobOutputs& want) {
  double worst = RelativeError(got.output, want.output);
  for (size_t k = 0; k < got.queries.size(); ++k)
    worst = std::max(worst, RelativeError(got.queries[k], want.queries[k]));
  for (const auto& [name, t] : FusedStateTensors(got.state))
    worst = std::max(worst, RelativeError(*t, want.state.at(name)));
  return worst;
}

// bf16 mode (bf16 GEMM inputs, fp32 accumulation and state, bf16
// intermediate products): its error against the exact float64 reference is
// at most twice that of the float64 reference itself evaluated with every
// GEMM input and those products rounded to bf16.
TEST_P(CudaParityTest, Bf16WithinTwiceTheErrorOfBf16RoundedInputs) {
  LACT_SKIP_WITHOUT_GPU();
  const ParityCase& pc = GetParam();
  const ParityJob job = MakeParityJob(pc);
  const ReferenceRuns references =
      RunReferences(job, pc.config, {.bf16_operands = true, .bf16_activations = true});
  const reference::JobOutputs &want = references.exact, &rounded = references.bf16;
  absl::StatusOr<Outputs> got =
      RunOnGpu(job.model, pc.config, job.context, job.queries, cuda::Precision::kBf16, pc.tile);
  ASSERT_TRUE(got.ok()) << got.status();
  const double baseline = JobError(rounded, want), error = JobError(*got, want);
  std::printf("bf16 %s: error %.3g, bf16-input reference %.3g, ratio %.2f\n", pc.name.c_str(),
              error, baseline, error / baseline);
  EXPECT_LE(error, 2 * baseline);
}

// The bf16 tensor-core scan (--scan-math bf16): the same bound, against
// the float64 reference that also rounds the scan's inputs and outputs
// where the kernel does.
TEST_P(CudaParityTest, Bf16ScanWithinTwiceTheErrorOfBf16RoundedScan) {
  LACT_SKIP_WITHOUT_GPU();
  const ParityCase& pc = GetParam();
  if (pc.config.ssm.head_dim > cuda::kSsdBf16MaxHeadDim ||
      pc.config.ssm.d_state > cuda::kSsdBf16MaxState) {
    GTEST_SKIP() << "the bf16 scan takes head_dim <= 64 and d_state <= 128";
  }
  const ParityJob job = MakeParityJob(pc);
  const reference::JobOutputs want =
      reference::RunJob(job.model, pc.config, job.context, job.queries);
  const reference::JobOutputs rounded =
      reference::RunJob(job.model, pc.config, job.context, job.queries,
                        {.bf16_operands = true, .bf16_activations = true, .bf16_scan = true});
  absl::StatusOr<Outputs> got = RunOnGpu(job.model, pc.config, job.context, job.queries,
                                         cuda::Precision::kBf16, pc.tile, "bf16");
  ASSERT_TRUE(got.ok()) << got.status();
  const double baseline = JobError(rounded, want), error = JobError(*got, want);
  std::printf("bf16 scan %s: error %.3g, bf16-scan reference %.3g, ratio %.2f\n", pc.name.c_str(),
              error, baseline, error / baseline);
  EXPECT_LE(error, 2 * baseline);
}

// d_inner > 2 d_model: a row of one direction's bf16 outputs does not fit
// acc's row, so bf16 precision projects each direction into acc, and the
// reference takes out_proj as the sum of the two products there too.
TEST(CudaBf16, ProjectsEachDirectionWhereTheRowsCannotBeHeld) {
  LACT_SKIP_WITHOUT_GPU();
  ParityCase pc = FixedParityCases()[3];
  pc.config.ssm.expand = 3;
  ASSERT_GT(pc.config.d_inner(), 2 * pc.config.d_model);
  const ParityJob job = MakeParityJob(pc);
  for (const char* scan : {"fp32", "bf16"}) {
    const reference::JobOutputs want =
        reference::RunJob(job.model, pc.config, job.context, job.queries);
    const reference::JobOutputs rounded =
        reference::RunJob(job.model, pc.config, job.context, job.queries,
                          {.bf16_operands = true,
                           .bf16_activations = true,
                           .bf16_scan = std::string(scan) == "bf16"});
    absl::StatusOr<Outputs> got = RunOnGpu(job.model, pc.config, job.context, job.queries,
                                           cuda::Precision::kBf16, pc.tile, scan);
    ASSERT_TRUE(got.ok()) << got.status();
    const double baseline = JobError(rounded, want), error = JobError(*got, want);
    std::printf("bf16, %s scan, expand 3: error %.3g, reference %.3g, ratio %.2f\n", scan, error,
                baseline, error / baseline);
    EXPECT_LE(error, 2 * baseline) << scan << " scan";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaParityTest, ::testing::ValuesIn(FixedParityCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(UpdateRules, CudaParityTest,
                         ::testing::ValuesIn(UpdateRuleParityCases(/*bf16_newton_schulz=*/false)),
                         [](const auto& info) { return info.param.name; });
// The emulator (tools/cuda-emu, ASan, about 2 s a case) runs the first
// LACT_RANDOM_PARITY_CASES of the 60 a GPU runs.
#ifndef LACT_RANDOM_PARITY_CASES
#define LACT_RANDOM_PARITY_CASES 60
#endif
INSTANTIATE_TEST_SUITE_P(RandomShapes, CudaParityTest,
                         ::testing::ValuesIn(RandomParityCases(LACT_RANDOM_PARITY_CASES)),
                         [](const auto& info) { return info.param.name; });

TEST(CudaRunner, NoSuchDeviceIsAFailedPrecondition) {
  const ParityJob job = MakeParityJob(FixedParityCases()[0]);
  BackendOptions options{.backend = "cuda"};
  options.device = cuda::DeviceCount();
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner =
      CudaRunner::Create(job.model, FixedParityCases()[0].config, options);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(runner.status().message().find(absl::StrCat("no CUDA device ", options.device)),
            std::string::npos)
      << runner.status();
}

TEST(CudaRunner, RefusesBf16NewtonSchulzNamingWhatItRuns) {
  const ParityCase pc = UpdateRuleParityCases(/*bf16_newton_schulz=*/true).back();
  ASSERT_TRUE(pc.config.ttt.ns_bf16);
  const ParityJob job = MakeParityJob(pc);
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner = CudaRunner::Create(job.model, pc.config);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runner.status().message().find("allowed here: \"float32\""), std::string::npos)
      << runner.status();
}

TEST(CudaRunner, Bf16ScanNeedsBf16PrecisionAndItsShapes) {
  ParityCase pc = FixedParityCases()[2];
  ParityJob job = MakeParityJob(pc);
  BackendOptions options{.backend = "cuda", .precision = "fp32"};
  options.scan_math = "bf16";
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner =
      CudaRunner::Create(job.model, pc.config, options);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runner.status().message().find("needs --precision bf16"), std::string::npos)
      << runner.status();
  options.precision = "bf16";
  pc.config.ssm.d_state = cuda::kSsdBf16MaxState + 1;
  job = MakeParityJob(pc);
  runner = CudaRunner::Create(job.model, pc.config, options);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runner.status().message().find("d_state <= 128"), std::string::npos) << runner.status();
}

// Without --scan-math the precision picks: bf16 precision the bf16 scan
// where the model's shapes allow it, the fp32 scan otherwise; fp32
// precision the fp32 scan. A named scan math is what runs.
TEST(ScanMathFor, TheBf16ScanByDefaultInBf16PrecisionWhereTheShapesAllow) {
  ModelConfig c = FixedParityCases()[0].config;
  c.ssm.head_dim = cuda::kSsdBf16MaxHeadDim;
  c.ssm.d_state = cuda::kSsdBf16MaxState;
  EXPECT_EQ(ScanMathFor("", cuda::Precision::kBf16, c).value(), cuda::SsdMath::kBf16);
  EXPECT_EQ(ScanMathFor("", cuda::Precision::kFp32, c).value(), cuda::SsdMath::kFp32);
  EXPECT_EQ(ScanMathFor("fp32", cuda::Precision::kBf16, c).value(), cuda::SsdMath::kFp32);
  EXPECT_EQ(ScanMathFor("tf32x3", cuda::Precision::kBf16, c).value(), cuda::SsdMath::kTf32x3);
  c.ssm.head_dim = cuda::kSsdBf16MaxHeadDim + 1;
  EXPECT_EQ(ScanMathFor("", cuda::Precision::kBf16, c).value(), cuda::SsdMath::kFp32);
  EXPECT_EQ(ScanMathFor("bf16", cuda::Precision::kBf16, c).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScanMathFor("fp16", cuda::Precision::kBf16, c).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaRunner, RejectsBadTokens) {
  LACT_SKIP_WITHOUT_GPU();
  const ParityCase pc = FixedParityCases()[2];
  const ParityJob job = MakeParityJob(pc);
  absl::StatusOr<std::unique_ptr<CudaRunner>> runner = CudaRunner::Create(job.model, pc.config);
  ASSERT_TRUE(runner.ok()) << runner.status();
  FusedState state;
  Tensor wrong({3, pc.config.input_width() + 1});
  EXPECT_EQ((*runner)->RunContext(wrong, &state).status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor nan = job.context;
  nan.data[5] = std::nanf("");
  absl::Status s = (*runner)->RunContext(nan, &state).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokens must be finite"), std::string::npos) << s;
}

}  // namespace
}  // namespace lact::testing
