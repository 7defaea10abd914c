// A dense row-major host tensor: a shape and an owned contiguous buffer.
// Plain value type; not thread-safe for concurrent mutation.
#ifndef LACT_COMMON_TENSOR_H_
#define LACT_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lact {

template <typename T>
struct BasicTensor {
  std::vector<int64_t> shape;
  std::vector<T> data;

  BasicTensor() = default;
  explicit BasicTensor(std::vector<int64_t> s) : shape(std::move(s)), data(NumElements(shape)) {}

  static int64_t NumElements(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(int i) const { return shape[i]; }
  int rank() const { return static_cast<int>(shape.size()); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
};

using Tensor = BasicTensor<float>;
using TensorD = BasicTensor<double>;

// The element count of `shape`, or -1 when a dimension is negative or the
// count exceeds `limit`; never overflows, so it can check a shape read from
// an untrusted file before anything is allocated for it.
int64_t CheckedNumElements(const std::vector<int64_t>& shape, int64_t limit);

// "[3, 4]" for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace lact

#endif  // LACT_COMMON_TENSOR_H_
