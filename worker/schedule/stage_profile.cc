#include "worker/schedule/stage_profile.h"

#include <chrono>
#include <utility>

#include "common/timing.h"

namespace lact {
namespace {

// call(), its time added to `profile` as `stage` with `rows`.
template <typename F>
absl::Status Timed(StageProfile* profile, Stage stage, int64_t rows, F&& call) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = call();
  profile->Add(stage, SecondsSince(start), rows);
  return status;
}

constexpr const char* kNames[] = {"load_tokens",   "block_norm", "mixer_fwd",    "mixer_bwd",
                                  "mixer_summary", "scan_state", "lact_grads",   "allreduce_wait",
                                  "lact_update",   "lact_apply", "residual_mlp", "output",
                                  "sync",          "exchange",   "output_rows"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Stage::kCount));

class ProfiledOps final : public BackendOps {
 public:
  ProfiledOps(std::unique_ptr<BackendOps> inner, StageProfile* profile)
      : BackendOps(inner->tokens(), inner->tile()), inner_(std::move(inner)), profile_(profile) {}

  absl::Status LoadTokens(Tensor tokens) override {
    return Timed(Stage::kLoadTokens, tokens.rank() ? tokens.dim(0) : 0,
                 [&] { return inner_->LoadTokens(std::move(tokens)); });
  }
  absl::Status OutputRows(int64_t first, int64_t n, float* out) override {
    return Timed(Stage::kOutput, n, [&] { return inner_->OutputRows(first, n, out); });
  }
  std::shared_ptr<Tensor> OutputBuffer(int64_t width) override {
    return inner_->OutputBuffer(width);
  }
  absl::Status ReadRows(Activation a, int64_t first, int64_t n, float* out) override {
    return Timed(Stage::kOutput, n, [&] { return inner_->ReadRows(a, first, n, out); });
  }
  absl::Status BeginBlock(const LayerWeights& w) override {
    profile_->BeginLayer();
    return Timed(Stage::kBlockNorm, tokens(), [&] { return inner_->BeginBlock(w); });
  }
  absl::Status LoadScanState(const MambaState& state) override {
    return Timed(Stage::kScanState, 0, [&] { return inner_->LoadScanState(state); });
  }
  absl::Status StoreScanState(MambaState* state, float* log_decay) override {
    return Timed(Stage::kScanState, 0, [&] { return inner_->StoreScanState(state, log_decay); });
  }
  absl::Status MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) override {
    const Stage stage = !outputs          ? Stage::kMixerSummary
                        : dir == kForward ? Stage::kMixerFwd
                                          : Stage::kMixerBwd;
    return Timed(stage, n, [&] { return inner_->MixerTile(w, dir, first, n, outputs, summarize); });
  }
  absl::Status LoadFastWeights(const LayerWeights& w, const LayerState* retained) override {
    return Timed(Stage::kLactUpdate, 0, [&] { return inner_->LoadFastWeights(w, retained); });
  }
  absl::Status StoreFastWeights(LayerState* state) override {
    return Timed(Stage::kLactUpdate, 0, [&] { return inner_->StoreFastWeights(state); });
  }
  absl::Status ZeroGrads() override {
    return Timed(Stage::kLactUpdate, 0, [&] { return inner_->ZeroGrads(); });
  }
  absl::Status AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) override {
    return Timed(Stage::kLactGrads, n, [&] { return inner_->AccumulateGrads(w, first, n); });
  }
  absl::Status StartGradAllReduce() override {
    return Timed(Stage::kAllReduceWait, 0, [&] { return inner_->StartGradAllReduce(); });
  }
  absl::Status FinishGradAllReduce() override {
    return Timed(Stage::kAllReduceWait, 0, [&] { return inner_->FinishGradAllReduce(); });
  }
  absl::Status UpdateFastWeights(const LayerWeights& w) override {
    return Timed(Stage::kLactUpdate, 0, [&] { return inner_->UpdateFastWeights(w); });
  }
  absl::Status ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) override {
    return Timed(Stage::kLactApply, n, [&] { return inner_->ApplyFastWeights(w, first, n); });
  }
  absl::Status ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) override {
    return Timed(Stage::kResidualMlp, n, [&] { return inner_->ResidualMlp(w, first, n); });
  }
  absl::Status Sync() override {
    return Timed(Stage::kSync, 0, [&] { return inner_->Sync(); });
  }

 private:
  template <typename F>
  absl::Status Timed(Stage stage, int64_t rows, F&& call) {
    return lact::Timed(profile_, stage, rows, std::forward<F>(call));
  }

  std::unique_ptr<BackendOps> inner_;
  StageProfile* profile_;
};

class ProfiledCollective final : public Collective {
 public:
  ProfiledCollective(Collective* inner, StageProfile* profile) : inner_(inner), profile_(profile) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    return Timed(profile_, Stage::kExchange, 0, [&] { return inner_->AllReduceSum(data, count); });
  }
  absl::Status AllGather(const float* in, size_t count, float* out) override {
    return Timed(profile_, Stage::kExchange, 0, [&] { return inner_->AllGather(in, count, out); });
  }

 private:
  Collective* inner_;
  StageProfile* profile_;
};

}  // namespace

const char* StageName(Stage stage) { return kNames[static_cast<size_t>(stage)]; }

void StageProfile::Add(Stage stage, double seconds, int64_t rows) {
  if (current_ >= static_cast<int>(per_layer_.size())) per_layer_.resize(current_ + 1);
  Cell& cell = (current_ < 0 ? outside_ : per_layer_[current_])[static_cast<size_t>(stage)];
  cell.seconds += seconds;
  ++cell.calls;
  cell.rows += rows;
}

const StageProfile::Cell& StageProfile::At(int layer, Stage stage) const {
  return (layer < 0 ? outside_ : per_layer_.at(layer))[static_cast<size_t>(stage)];
}

StageProfile::Cell StageProfile::Total(Stage stage) const {
  Cell sum = outside_[static_cast<size_t>(stage)];
  for (const Row& row : per_layer_) {
    const Cell& c = row[static_cast<size_t>(stage)];
    sum.seconds += c.seconds;
    sum.calls += c.calls;
    sum.rows += c.rows;
  }
  return sum;
}

double StageProfile::TotalSeconds() const {
  double sum = 0;
  for (size_t s = 0; s < static_cast<size_t>(Stage::kCount); ++s) {
    sum += Total(static_cast<Stage>(s)).seconds;
  }
  return sum;
}

nlohmann::json StageProfile::ToJson() const {
  const auto seconds = [](const auto& cell_of) {
    nlohmann::json out = nlohmann::json::object();
    for (size_t s = 0; s < static_cast<size_t>(Stage::kCount); ++s) {
      const double t = cell_of(static_cast<Stage>(s)).seconds;
      if (t > 0) out[kNames[s]] = t;
    }
    return out;
  };
  nlohmann::json json = {{"total", seconds([&](Stage s) { return Total(s); })},
                         {"layers", nlohmann::json::array()}};
  for (int layer = 0; layer < layers(); ++layer) {
    json["layers"].push_back(seconds([&](Stage s) { return At(layer, s); }));
  }
  return json;
}

std::unique_ptr<BackendOps> Profiled(std::unique_ptr<BackendOps> inner, StageProfile* profile) {
  return std::make_unique<ProfiledOps>(std::move(inner), profile);
}

ShardContext Profiled(const ShardContext& shard, StageProfile* profile,
                      std::unique_ptr<Collective>* exchange) {
  ShardContext timed = shard;
  *exchange = std::make_unique<ProfiledCollective>(shard.sync, profile);
  timed.sync = exchange->get();
  if (shard.output_rows) {
    timed.output_rows = [sink = shard.output_rows, profile](RowSlice rows) {
      const int64_t n = rows.n;
      return Timed(profile, Stage::kOutputRows, n, [&] { return sink(std::move(rows)); });
    };
  }
  return timed;
}

}  // namespace lact
