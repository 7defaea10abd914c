// bf16 copies of float32 arrays whose values are bf16 already (a model's
// GEMM weights, rounded at load; the fast weights' rounded copy), made once,
// so that the bf16 matmul reads them in place instead of packing them anew
// on every call (bf16_matmul.h). A copy keeps its array's layout: a matrix
// anywhere inside an array that was put here (a head's block, a range of
// rows) is found, and keeps its leading dimension.
//
// Put is not thread-safe; Find is const and may run on any number of
// threads between Puts. An array must outlive its copy, and must not change
// without another Put: a stale copy would multiply the old values.
#ifndef LACT_KERNELS_CPU_BF16_COPIES_H_
#define LACT_KERNELS_CPU_BF16_COPIES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace lact::cpu {

class Bf16Copies {
 public:
  // (Re)makes the copy of array[0, count), replacing one made before at the
  // same address. Values that are not bf16 are rounded to nearest even.
  void Put(const float* array, int64_t count);

  // The copy of p[0, extent), or nullptr where those elements do not lie
  // inside one array that was put here.
  const uint16_t* Find(const float* p, int64_t extent) const;

  int64_t size() const { return static_cast<int64_t>(copies_.size()); }

 private:
  // By the address of the array copied.
  std::map<const float*, std::vector<uint16_t>, std::less<>> copies_;
};

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_BF16_COPIES_H_
