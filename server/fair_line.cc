#include "server/fair_line.h"

#include <algorithm>
#include <tuple>

namespace lact::server {

uint64_t FairLine::Join(const std::string& tenant) {
  const uint64_t ticket = next_ticket_++;
  std::deque<uint64_t>& line = waiting_[tenant];
  // A tenant with nothing waiting joins the rotation at its back, as if
  // just served: new tenant names cannot jump the line.
  if (line.empty()) last_served_[tenant] = serves_;
  line.push_back(ticket);
  tenant_of_[ticket] = tenant;
  return ticket;
}

void FairLine::Leave(uint64_t ticket) {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return;
  std::deque<uint64_t>& line = waiting_[it->second];
  line.erase(std::find(line.begin(), line.end(), ticket));
  if (line.empty()) {
    waiting_.erase(it->second);
    last_served_.erase(it->second);
  }
  tenant_of_.erase(it);
}

void FairLine::Served(uint64_t ticket) {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return;
  const std::string tenant = it->second;
  Leave(ticket);
  ++serves_;
  if (waiting_.count(tenant)) last_served_[tenant] = serves_;
}

int FairLine::Position(uint64_t ticket) const {
  auto it = tenant_of_.find(ticket);
  if (it == tenant_of_.end()) return 0;
  const std::string& tenant = it->second;
  const std::deque<uint64_t>& own = waiting_.at(tenant);
  const int64_t k = std::find(own.begin(), own.end(), ticket) - own.begin();
  // A tenant's place in the rotation: least recently served, then oldest waiter.
  const auto rank = [this](const std::string& t, const std::deque<uint64_t>& line) {
    return std::make_tuple(last_served_.at(t), line.front());
  };
  const auto mine = rank(tenant, own);
  int64_t ahead = k;  // own earlier jobs
  for (const auto& [t, line] : waiting_) {
    if (t == tenant) continue;
    const int64_t n = static_cast<int64_t>(line.size());
    // Each round before ours serves one of theirs; in our round, theirs goes first if they rotate
    // earlier.
    ahead += std::min(n, k) + (n > k && rank(t, line) < mine ? 1 : 0);
  }
  return static_cast<int>(ahead + 1);
}

}  // namespace lact::server
