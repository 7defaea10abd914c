// NumPy .npy files: read float32 or float16 arrays in C order (float16 is
// upcast), write float32. Every malformed input (bad magic, unsupported
// version, dtype or Fortran order, a header that does not parse, a payload
// shorter or longer than the shape) is INVALID_ARGUMENT naming the file.
#ifndef LACT_COMMON_NPY_H_
#define LACT_COMMON_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace lact {

absl::StatusOr<Tensor> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);

}  // namespace lact

#endif  // LACT_COMMON_NPY_H_
