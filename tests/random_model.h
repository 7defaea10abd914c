// Random models and tokens for the randomized tests: the preset
// initialisation with every norm weight, skip D and bias perturbed so that
// no weight is a silent 1 or 0.
#ifndef LACT_TESTS_RANDOM_MODEL_H_
#define LACT_TESTS_RANDOM_MODEL_H_

#include <cstdint>

#include "common/model.h"
#include "common/tensor.h"

namespace lact::testing {

Model RandomTestModel(const ModelConfig& config, uint64_t seed);
Tensor RandomTokens(int64_t tokens, int64_t width, uint64_t seed);

}  // namespace lact::testing

#endif  // LACT_TESTS_RANDOM_MODEL_H_
