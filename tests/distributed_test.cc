// Distribution invariance (docs/model.md, What distribution must not change) through real Gloo over
// TCP on 127.0.0.1: the context split into contiguous shards over P ranks (threads of this process,
// each with its own Gloo contexts), uneven splits, shards of one token and shards shorter than W-1,
// chunks spanning shards. Every golden tensor within 1e-4; random models agree with the float64
// reference for P = 1..4; every rank ends with the same fused state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "gloo/rendezvous/hash_store.h"
#include "kernels/reference/reference_model.h"
#include "tests/gloo_ranks.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "worker/collective/gloo_collective.h"
#include "worker/collective/rendezvous_timeout.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

using ::testing::HasSubstr;

struct DistributedResult {
  Tensor output;
  std::vector<FusedState> states;  // per rank
};

Tensor Rows(const Tensor& t, int64_t begin, int64_t count) {
  Tensor out({count, t.dim(1)});
  std::copy_n(t.ptr() + begin * t.dim(1), count * t.dim(1), out.ptr());
  return out;
}

DistributedResult RunDistributed(const Model& model, const ModelConfig& config,
                                 const Tensor& context, const std::vector<int64_t>& lengths,
                                 const std::string& precision = "fp32") {
  const int ranks = static_cast<int>(lengths.size());
  const int64_t total = context.dim(0);
  std::vector<int64_t> begins(ranks, 0);
  for (int r = 1; r < ranks; ++r) begins[r] = begins[r - 1] + lengths[r - 1];
  std::vector<Tensor> outputs(ranks);
  std::vector<FusedState> states(ranks);
  const std::vector<absl::Status> statuses =
      RunGlooRanks(ranks, [&](int r, Collective* sync, Collective* grads) {
        CpuRunner runner(model, config, {.threads = 1, .tile_tokens = 5, .precision = precision});
        auto out = runner.RunContextShard(Rows(context, begins[r], lengths[r]), begins[r], total,
                                          sync, grads, &states[r]);
        if (out.ok()) outputs[r] = *std::move(out);
        return out.status();
      });
  DistributedResult result;
  result.output = Tensor({total, config.output_width()});
  int64_t row = 0;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    if (!statuses[r].ok()) continue;
    std::copy(outputs[r].data.begin(), outputs[r].data.end(),
              result.output.ptr() + row * config.output_width());
    row += lengths[r];
  }
  result.states = std::move(states);
  return result;
}

void ExpectSameStateOnEveryRank(const std::vector<FusedState>& states) {
  const auto first = FusedStateTensors(states[0]);
  for (size_t r = 1; r < states.size(); ++r) {
    for (const auto& [name, t] : FusedStateTensors(states[r])) {
      EXPECT_EQ(t->data, first.at(name)->data) << "rank " << r << " " << name;
    }
  }
}

struct GoldenSplit {
  std::string name;
  std::vector<int64_t> lengths;
};

void PrintTo(const GoldenSplit& s, std::ostream* os) {
  *os << s.name << " [" << absl::StrJoin(s.lengths, ",") << "]";
}

class DistributedGoldenTest : public ::testing::TestWithParam<GoldenSplit> {};

TEST_P(DistributedGoldenTest, MatchesExpected) {
  const GoldenSplit& split = GetParam();
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase(split.name);
  ASSERT_TRUE(golden.ok()) << golden.status();
  ASSERT_EQ(std::accumulate(split.lengths.begin(), split.lengths.end(), int64_t{0}),
            golden->context.dim(0));
  DistributedResult got =
      RunDistributed(golden->model, golden->config, golden->context, split.lengths);
  EXPECT_LE(RelativeError(got.output, golden->expected.at("output")), 1e-4);
  ExpectSameStateOnEveryRank(got.states);
  for (const auto& [name, t] : FusedStateTensors(got.states.back())) {
    EXPECT_LE(RelativeError(*t, golden->expected.at(name)), 1e-4) << name;
  }
  CpuRunner runner(golden->model, golden->config, {.threads = 1, .tile_tokens = 4096});
  for (size_t k = 0; k < golden->queries.size(); ++k) {
    auto q = runner.RunQuery(golden->queries[k], got.states[0]);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_LE(RelativeError(*q, golden->expected.at(absl::StrCat("query_", k))), 1e-4)
        << "query " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, DistributedGoldenTest,
                         ::testing::Values(GoldenSplit{"tiny", {37}}, GoldenSplit{"tiny", {18, 19}},
                                           GoldenSplit{"tiny", {12, 13, 12}},
                                           GoldenSplit{"tiny", {1, 35, 1}},
                                           GoldenSplit{"tiny", {2, 1, 34}},
                                           GoldenSplit{"tiny", {30, 2, 1, 4}},
                                           GoldenSplit{"tiny_embed_chunked_muon", {30, 34}},
                                           GoldenSplit{"tiny_embed_chunked_muon", {1, 62, 1}},
                                           GoldenSplit{"tiny_embed_chunked_muon", {20, 5, 39}},
                                           GoldenSplit{"tiny_job_overrides", {5, 3, 21}},
                                           GoldenSplit{"tiny_job_overrides", {1, 1, 1, 26}},
                                           GoldenSplit{"tiny_job_overrides", {14, 15}}));

class DistributedRandomTest : public ::testing::TestWithParam<int> {};

// Random lengths >= 1 over `ranks` ranks summing to `total`.
std::vector<int64_t> RandomSplit(Random& r, int64_t total, int ranks) {
  std::vector<int64_t> lengths(ranks, 1);
  for (int64_t left = total - ranks; left > 0; --left) ++lengths[r.NextU64() % ranks];
  return lengths;
}

ModelConfig RandomConfig(Random& r) {
  ModelConfig c;
  c.d_model = 16;
  c.n_layers = 2;
  c.ssm = {2, 8, 6, 2 + static_cast<int>(r.NextU64() % 4)};
  c.ttt = {8, 2, 0.2, static_cast<int>(r.NextU64() % 2), 0};
  c.mlp_hidden = 24;
  return c;
}

TEST_P(DistributedRandomTest, IndependentOfRankCount) {
  Random r(GetParam() + 31);
  ModelConfig c = RandomConfig(r);
  const int64_t total = 4 + r.NextU64() % 40;
  if (r.NextU64() % 2) c.ttt.chunk_tokens = 3 + static_cast<int>(r.NextU64() % 12);
  if (c.ttt.muon_steps > 0)
    c.ttt.chunk_tokens = 0;  // Muon on many tiny chunks is ill-conditioned (docs/model.md)
  Model model = RandomTestModel(c, GetParam());
  Tensor context = RandomTokens(total, c.d_model, GetParam() + 5);
  reference::JobOutputs want = reference::RunJob(model, c, context, {});
  for (int ranks = 1; ranks <= 4; ++ranks) {
    std::vector<int64_t> lengths = RandomSplit(r, total, ranks);
    SCOPED_TRACE(absl::StrCat("ranks ", ranks, " split [", absl::StrJoin(lengths, ","),
                              "] conv width ", c.ssm.conv_width, " chunk ", c.ttt.chunk_tokens));
    DistributedResult got = RunDistributed(model, c, context, lengths);
    EXPECT_LE(RelativeError(got.output, want.output), 1e-4);
    ExpectSameStateOnEveryRank(got.states);
    for (const auto& [name, t] : FusedStateTensors(got.states[0])) {
      EXPECT_LE(RelativeError(*t, want.state.at(name)), 1e-4) << name;
    }
  }
}

// The bf16 mode over 1-4 ranks: within twice the error of the float64
// reference run on bf16-rounded operands, the same state on every rank.
TEST_P(DistributedRandomTest, Bf16WithinTwiceTheErrorOfBf16RoundedOperandsOnAnyRankCount) {
  Random r(GetParam() + 77);
  ModelConfig c = RandomConfig(r);
  const int64_t total = 4 + r.NextU64() % 40;
  if (c.ttt.muon_steps == 0) c.ttt.chunk_tokens = 3 + static_cast<int>(r.NextU64() % 12);
  Model model = RandomTestModel(c, GetParam());
  Tensor context = RandomTokens(total, c.d_model, GetParam() + 5);
  const reference::JobOutputs want = reference::RunJob(model, c, context, {});
  const reference::JobOutputs rounded =
      reference::RunJob(model, c, context, {}, {.bf16_operands = true});
  double baseline = RelativeError(rounded.output, want.output);
  for (const auto& [name, t] : rounded.state)
    baseline = std::max(baseline, RelativeError(t, want.state.at(name)));
  for (int ranks = 1; ranks <= 4; ++ranks) {
    std::vector<int64_t> lengths = RandomSplit(r, total, ranks);
    SCOPED_TRACE(absl::StrCat("ranks ", ranks, " split [", absl::StrJoin(lengths, ","), "]"));
    DistributedResult got = RunDistributed(model, c, context, lengths, "bf16");
    double error = RelativeError(got.output, want.output);
    for (const auto& [name, t] : FusedStateTensors(got.states[0]))
      error = std::max(error, RelativeError(*t, want.state.at(name)));
    EXPECT_LE(error, 2 * baseline) << "bf16-operand reference's error " << baseline;
    ExpectSameStateOnEveryRank(got.states);
  }
}

INSTANTIATE_TEST_SUITE_P(Random, DistributedRandomTest, ::testing::Range(0, 8));

TEST(GlooCollective, PeerThatNeverArrivesTimesOut) {
  gloo::rendezvous::HashStore store;
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(500);
  auto one = GlooCollective::Connect(store, "lonely", 0, 2, options);
  EXPECT_FALSE(one.ok());
}

// A store whose waits end the way `fail` says: the worker's KvStoreClient
// throws RendezvousTimeout when the coordinator's wait ran out, and other
// errors when the coordinator cannot be reached.
class FailingStore : public gloo::rendezvous::HashStore {
 public:
  explicit FailingStore(std::function<void()> fail) : fail_(std::move(fail)) {}
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    fail_();
  }

 private:
  std::function<void()> fail_;
};

TEST(GlooCollective, ARendezvousTimeoutIsDeadlineExceededAndABrokenStoreUnavailable) {
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(500);
  FailingStore late([] { throw RendezvousTimeout("the peers did not come"); });
  absl::StatusOr<std::unique_ptr<GlooCollective>> timed_out =
      GlooCollective::Connect(late, "late", 0, 2, options);
  ASSERT_FALSE(timed_out.ok());
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded) << timed_out.status();
  EXPECT_THAT(std::string(timed_out.status().message()), HasSubstr("the peers did not come"));
  FailingStore broken(
      [] { throw std::runtime_error("rendezvous get failed: connection refused"); });
  absl::StatusOr<std::unique_ptr<GlooCollective>> gone =
      GlooCollective::Connect(broken, "broken", 0, 2, options);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().code(), absl::StatusCode::kDeadlineExceeded) << gone.status();
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("connection refused"));
}

}  // namespace
}  // namespace lact::testing
