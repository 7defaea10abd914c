#include "tests/parity_cases.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "tests/random_model.h"

namespace lact::testing {
namespace {

ModelConfig Config(int d, int layers, int d_in, int d_out, int expand, int p, int n, int w, int dh,
                   int inter, int mlp, double lr, int muon, int chunk) {
  ModelConfig c;
  c.d_model = d;
  c.n_layers = layers;
  c.d_input = d_in;
  c.d_output = d_out;
  c.ssm = {expand, p, n, w};
  c.ttt = {dh, inter, lr, muon, chunk};
  c.mlp_hidden = mlp;
  return c;
}

}  // namespace

std::vector<ParityCase> FixedParityCases() {
  return {
      {"one_token", Config(16, 1, 0, 0, 2, 8, 4, 4, 8, 2, 24, 0.1, 0, 0), 1, {1}, 4096, 2},
      {"shorter_than_conv",
       Config(16, 2, 0, 0, 2, 8, 4, 4, 8, 2, 24, 0.1, 0, 0),
       2,
       {1, 3},
       4096,
       1},
      {"odd_sizes", Config(12, 2, 5, 7, 1, 3, 5, 3, 6, 3, 20, 0.05, 0, 0), 37, {1, 11}, 4096, 2},
      {"chunks_divide", Config(16, 2, 0, 0, 2, 8, 8, 4, 16, 2, 32, 0.3, 0, 8), 32, {4}, 4096, 2},
      {"chunks_ragged_muon",
       Config(16, 2, 0, 0, 2, 4, 6, 4, 8, 2, 32, 0.3, 3, 7),
       30,
       {1},
       4096,
       1},
      {"muon_one_chunk", Config(24, 1, 10, 0, 2, 12, 8, 2, 12, 1, 40, 0.2, 2, 0), 45, {5}, 4096, 2},
      {"conv_width_one", Config(8, 1, 0, 3, 2, 4, 4, 1, 4, 2, 16, 0.1, 0, 5), 13, {1}, 4096, 2},
      {"long_scan_chunks",
       Config(16, 1, 0, 0, 2, 8, 8, 4, 8, 2, 24, 0.05, 0, 0),
       150,
       {70},
       4096,
       2},
      {"tiny_tiles", Config(16, 2, 0, 0, 2, 8, 8, 4, 8, 2, 24, 0.2, 1, 9), 41, {6}, 3, 2},
      {"one_token_tiles", Config(12, 1, 0, 0, 2, 6, 4, 4, 6, 2, 18, 0.2, 0, 4), 11, {2}, 1, 1},
      {"chunk_longer_than_context",
       Config(16, 1, 0, 0, 2, 8, 8, 4, 8, 2, 24, 0.2, 0, 100),
       20,
       {3},
       6,
       2},
  };
}

std::vector<ParityCase> UpdateRuleParityCases(bool bf16_newton_schulz) {
  const auto rule = [](ModelConfig c, bool normalize, bool bf16) {
    c.ttt.normalize_update = normalize;
    c.ttt.ns_bf16 = bf16;
    return c;
  };
  const ModelConfig c = Config(16, 2, 0, 0, 2, 8, 8, 4, 8, 2, 32, 0.3, 0, 0);
  ModelConfig chunks = rule(c, true, false);
  chunks.ttt.chunk_tokens = 7;
  std::vector<ParityCase> cases = {
      {"normalized_update", rule(c, true, false), 29, {3}, 4096, 2},
      {"normalized_update_chunks", chunks, 30, {1}, 5, 1},
  };
  if (bf16_newton_schulz) {
    ModelConfig muon = rule(c, false, true);
    muon.ttt.muon_steps = 3;
    cases.push_back({"ns_bf16_muon", muon, 31, {2}, 4096, 2});
    ModelConfig chunked = rule(c, true, true);
    chunked.ttt.chunk_tokens = 9;
    cases.push_back({"ns_bf16_normalized_chunks", chunked, 30, {1}, 4096, 1});
  }
  return cases;
}

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.name << " " << ModelConfigToJson(c.config) << " L=" << c.context_tokens
      << " tile=" << c.tile;
}

namespace {

// A random valid shape from `seed`: every size small, often odd or 1.
ParityCase RandomCase(uint64_t seed) {
  Random r(seed * 7919 + 13);
  const auto pick = [&](int lo, int hi) {
    return lo + static_cast<int>(r.NextU64() % (hi - lo + 1));
  };
  const int heads = pick(1, 2), dh = std::vector<int>{2, 3, 4, 6, 8}[pick(0, 4)], d = heads * dh;
  const int expand = pick(1, 2), d_inner = expand * d;
  std::vector<int> divisors;
  for (int p = 1; p <= std::min(d_inner, 8); ++p)
    if (d_inner % p == 0) divisors.push_back(p);
  const int p = divisors[pick(0, static_cast<int>(divisors.size()) - 1)];
  const int64_t tokens = pick(1, 90);
  const int muon = pick(0, 3);
  // Many Muon updates on tiny chunks are chaotic: there the float64 reference
  // itself moves by >1e-4 when its input moves by 1e-7 (measured: 1.4e-4 for
  // 89 one-token chunks), so no float32 run can meet 1e-4. Muon cases keep at
  // most 6 chunks of at least 8 tokens.
  const int min_chunk = muon > 0 ? std::max<int>(8, static_cast<int>((tokens + 5) / 6)) : 1;
  const int chunk =
      pick(0, 2) == 0 ? 0 : pick(min_chunk, std::max(min_chunk, static_cast<int>(tokens) + 3));
  ParityCase c{absl::StrCat("random_", seed),
               Config(d, pick(1, 2), pick(0, 1) ? pick(1, 9) : 0, pick(0, 1) ? pick(1, 9) : 0,
                      expand, p, pick(1, 8), pick(1, 5), dh, pick(1, 3), pick(4, 40),
                      0.01 + 0.5 * r.Uniform(), muon, chunk),
               tokens,
               {},
               pick(0, 1) ? 4096 : pick(1, 80),
               pick(1, 2)};
  for (int k = pick(0, 2); k > 0; --k) c.query_tokens.push_back(pick(1, 12));
  return c;
}

}  // namespace

std::vector<ParityCase> RandomParityCases(int count) {
  std::vector<ParityCase> cases;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(count); ++seed)
    cases.push_back(RandomCase(seed));
  return cases;
}

ParityJob MakeParityJob(const ParityCase& pc) {
  ParityJob job{RandomTestModel(pc.config, 7),
                RandomTokens(pc.context_tokens, pc.config.input_width(), 1),
                {}};
  for (size_t k = 0; k < pc.query_tokens.size(); ++k) {
    job.queries.push_back(RandomTokens(pc.query_tokens[k], pc.config.input_width(), 100 + k));
  }
  return job;
}

ReferenceRuns RunReferences(const ParityJob& job, const ModelConfig& config,
                            reference::ReferenceOptions bf16) {
  return {reference::RunJob(job.model, config, job.context, job.queries),
          reference::RunJob(job.model, config, job.context, job.queries, bf16)};
}

}  // namespace lact::testing
