#include "server/fair_line.h"

#include <algorithm>
#include <tuple>

namespace lact::server {

uint64_t FairLine::Join(const std::string& tenant) {
  const uint64_t ticket = next_ticket_++;
  waiting_[tenant].push_back(ticket);
  tenant_of_[ticket] = tenant;
  return ticket;
}

void FairLine::Leave(uint64_t ticket) {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return;
  std::deque<uint64_t>& line = waiting_[it->second];
  line.erase(std::find(line.begin(), line.end(), ticket));
  if (line.empty()) waiting_.erase(it->second);
  tenant_of_.erase(it);
}

void FairLine::Served(uint64_t ticket) {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return;
  last_served_[it->second] = ++serves_;
  Leave(ticket);
}

int FairLine::Position(uint64_t ticket) const {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return 0;
  const std::string& tenant = it->second;
  const std::deque<uint64_t>& own = waiting_.at(tenant);
  const int64_t k = std::find(own.begin(), own.end(), ticket) - own.begin();
  // A tenant's place in the rotation: least recently served, then oldest waiter.
  const auto rank = [this](const std::string& t, const std::deque<uint64_t>& line) {
    auto served = last_served_.find(t);
    return std::make_tuple(served == last_served_.end() ? 0 : served->second, line.front());
  };
  const auto mine = rank(tenant, own);
  int64_t ahead = k;  // own earlier jobs
  for (const auto& [t, line] : waiting_) {
    if (t == tenant) continue;
    const int64_t n = static_cast<int64_t>(line.size());
    // Each round before ours serves one of theirs; in our round, theirs goes first if they rotate earlier.
    ahead += std::min(n, k) + (n > k && rank(t, line) < mine ? 1 : 0);
  }
  return static_cast<int>(ahead + 1);
}

}  // namespace lact::server
