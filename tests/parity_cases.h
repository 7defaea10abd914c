// The shape sweep of the parity tests, shared by every backend's suite:
// hand-picked edge cases (L = 1, L < W, odd widths, chunks that do and do
// not divide L, Muon on and off, one-token tiles) and 60 random shapes.
#ifndef LACT_TESTS_PARITY_CASES_H_
#define LACT_TESTS_PARITY_CASES_H_

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/model.h"
#include "common/model_config.h"
#include "common/tensor.h"
#include "kernels/reference/reference_model.h"
#include "tests/golden_case.h"

namespace lact::testing {

struct ParityCase {
  std::string name;
  ModelConfig config;
  int64_t context_tokens;
  std::vector<int64_t> query_tokens;
  int64_t tile;
  int threads;
};

void PrintTo(const ParityCase& c, std::ostream* os);

std::vector<ParityCase> FixedParityCases();
std::vector<ParityCase> RandomParityCases(int count = 60);
// Upstream LaCT's update rules (ttt.normalize_update, and with
// `bf16_newton_schulz` ttt.ns_precision bf16, which only the CPU runs).
std::vector<ParityCase> UpdateRuleParityCases(bool bf16_newton_schulz);

// A case's random model, context and query sets (fixed seeds per case).
struct ParityJob {
  Model model;
  Tensor context;
  std::vector<Tensor> queries;
};
ParityJob MakeParityJob(const ParityCase& pc);

// The float64 reference's outputs for a job: exact, and rounded as a
// backend's bf16 mode rounds (`bf16`: the bf16 mode's baseline).
struct ReferenceRuns {
  reference::JobOutputs exact;
  reference::JobOutputs bf16;
};
ReferenceRuns RunReferences(const ParityJob& job, const ModelConfig& config,
                            reference::ReferenceOptions bf16);

// The largest relative error over a job's tensors (output, query outputs,
// state); `Got` has `output`, `queries` and a name -> tensor map `state`,
// as reference::JobOutputs has.
template <typename Got>
double JobError(const Got& got, const reference::JobOutputs& want) {
  double worst = RelativeError(got.output, want.output);
  for (size_t k = 0; k < got.queries.size(); ++k)
    worst = std::max(worst, RelativeError(got.queries[k], want.queries[k]));
  for (const auto& [name, t] : got.state)
    worst = std::max(worst, RelativeError(t, want.state.at(name)));
  return worst;
}

}  // namespace lact::testing

#endif  // LACT_TESTS_PARITY_CASES_H_
