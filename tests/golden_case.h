// Loads a case of ../shared/golden (model, context, query sets, options and
// the float64 expected tensors) and compares results with the golden metric
// max|got - want| / max|want|.
#ifndef LACT_TESTS_GOLDEN_CASE_H_
#define LACT_TESTS_GOLDEN_CASE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model.h"
#include "common/tensor.h"

namespace lact::testing {

struct GoldenCase {
  std::string name;
  Model model;
  ModelConfig config;  // with the job's overrides applied
  JobOptions options;
  Tensor context;
  std::vector<Tensor> queries;
  std::map<std::string, TensorD> expected;
};

// The golden directory: $LACT_GOLDEN_DIR, else the build-time path of ../shared/golden.
std::string GoldenDir();
std::vector<std::string> GoldenCaseNames();
absl::StatusOr<GoldenCase> LoadGoldenCase(const std::string& name);

// max|got - want| / max|want| (absolute when want is all zeros); infinity on
// a shape mismatch or a non-finite value.
template <typename G, typename W>
double RelativeError(const BasicTensor<G>& got, const BasicTensor<W>& want);

}  // namespace lact::testing

#endif  // LACT_TESTS_GOLDEN_CASE_H_
