#include "worker/data_plane/result_item.h"

namespace lact {

std::vector<ResultItem> StateItems(const std::shared_ptr<const FusedState>& state) {
  std::vector<ResultItem> items;
  for (const auto& [name, tensor] : FusedStateTensors(*state)) {
    items.push_back({0, 0, name, std::shared_ptr<const Tensor>(state, tensor)});
  }
  return items;
}

bool TicketsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // compares every byte, whatever the first mismatch
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace lact
