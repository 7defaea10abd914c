// The shape sweep of the parity tests, shared by every backend's suite:
// hand-picked edge cases (L = 1, L < W, odd widths, chunks that do and do
// not divide L, Muon on and off, one-token tiles) and 60 random shapes.
#ifndef LACT_TESTS_PARITY_CASES_H_
#define LACT_TESTS_PARITY_CASES_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/model.h"
#include "common/model_config.h"
#include "common/tensor.h"

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

}  // namespace lact::testing

#endif  // LACT_TESTS_PARITY_CASES_H_
