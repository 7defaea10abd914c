// NumPy .npy files: read float32 or float16 arrays in C order (float16 is
// upcast), write float32. Every malformed input (bad magic, unsupported
// version, dtype or Fortran order, a header that does not parse, a shape
// too large to count, a payload shorter or longer than the shape) is
// INVALID_ARGUMENT naming the file; nothing is allocated for a shape before
// the file is known to hold its values.
#ifndef LACT_COMMON_NPY_H_
#define LACT_COMMON_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace lact {

absl::StatusOr<Tensor> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);

// A .npy header as read from the first `n` bytes of a file (the dtype
// string as written, e.g. "<f4"; the shape; its element count, checked to
// fit in 2^60 so that a byte count never overflows; where the data starts).
struct NpyLayout {
  std::string descr;
  std::vector<int64_t> shape;
  int64_t elements = 0;
  size_t data_offset = 0;
};
absl::StatusOr<NpyLayout> ParseNpyLayout(const std::string& path, const uint8_t* p, size_t n);

// The header bytes of a C-order array of `shape` whose dtype string is
// `descr` (64-byte aligned), and of a float32 one.
std::string NpyHeaderBytes(const std::vector<int64_t>& shape, const std::string& descr);
std::string NpyF32Header(const std::vector<int64_t>& shape);

}  // namespace lact

#endif  // LACT_COMMON_NPY_H_
