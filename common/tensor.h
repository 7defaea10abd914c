// A dense row-major host tensor: a shape and an owned contiguous buffer.
// Plain value type; not thread-safe for concurrent mutation.
#ifndef LACT_COMMON_TENSOR_H_
#define LACT_COMMON_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

// Rows [first, first + n) of a shared [L, width] tensor, which they keep
// alive.
struct RowSlice {
  std::shared_ptr<const Tensor> tensor;
  int64_t first = 0;
  int64_t n = 0;

  // All the rows of `t`.
  static RowSlice Whole(Tensor t) {
    const int64_t rows = t.rank() ? t.dim(0) : 0;
    return {std::make_shared<const Tensor>(std::move(t)), 0, rows};
  }
  int64_t width() const { return tensor->rank() == 2 ? tensor->dim(1) : 0; }
  const float* data() const { return tensor->ptr() + first * width(); }
  int64_t size() const { return n * width(); }
};

// The element count of `shape`, or -1 when a dimension is negative or the
// count exceeds `limit`; never overflows, so it can check a shape read from
// an untrusted file before anything is allocated for it.
int64_t CheckedNumElements(const std::vector<int64_t>& shape, int64_t limit);

// "[3, 4]" for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace lact

#endif  // LACT_COMMON_TENSOR_H_
