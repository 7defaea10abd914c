#include "worker/collective/collective.h"

#include <algorithm>

namespace lact {

absl::Status LocalCollective::AllGather(const float* in, size_t count, float* out) {
  std::copy_n(in, count, out);
  return absl::OkStatus();
}

}  // namespace lact
