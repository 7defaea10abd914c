#include "kernels/cpu/bf16_copies.h"

#include <iterator>

#include "common/half.h"

namespace lact::cpu {

void Bf16Copies::Put(const float* array, int64_t count) {
  std::vector<uint16_t>& bits = copies_[array];
  bits.resize(count);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) bits[i] = FloatToBFloat16(array[i]);
}

const uint16_t* Bf16Copies::Find(const float* p, int64_t extent) const {
  auto it = copies_.upper_bound(p);  // the first array that starts after p
  if (it == copies_.begin()) return nullptr;
  --it;
  const std::less<> before;
  const float* start = it->first;
  const int64_t count = static_cast<int64_t>(it->second.size());
  // p lies in [start, start + count) and so does its last element.
  if (!before(p, start + count) || extent > count - (p - start)) return nullptr;
  return it->second.data() + (p - start);
}

}  // namespace lact::cpu
