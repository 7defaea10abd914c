#include "kernels/cpu/bf16_copies.h"

#include "kernels/cpu/elementwise.h"

namespace lact::cpu {

void Bf16Copies::Put(const float* array, int64_t count) {
  std::vector<uint16_t>& bits = copies_[array];
  bits.resize(count);
  PackRowsToBf16(array, count, 1, count, bits.data());
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
