// The line of jobs waiting for workers: first come first served within a
// tenant, round robin across tenants, so one tenant's hundred jobs do not
// shut out another's one. The tenant served least recently goes first
// (ties: whose waiting job came first); a tenant with nothing waiting joins
// at the back of the rotation, as if just served, so new tenant names
// cannot jump the line. Each round serves the next job of every waiting
// tenant in that order. Memory is bounded by the waiting jobs. Not
// thread-safe: the registry holds its lock around every call.
#ifndef LACT_SERVER_FAIR_LINE_H_
#define LACT_SERVER_FAIR_LINE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace lact::server {

class FairLine {
 public:
  // Takes a place in line; returns the waiter's ticket.
  uint64_t Join(const std::string& tenant);
  // Leaves the line without being served.
  void Leave(uint64_t ticket);
  // Leaves the line served: its tenant goes to the back of the rotation.
  void Served(uint64_t ticket);
  // The waiter's place in the serving order (1 = next); 0 if not in line.
  int Position(uint64_t ticket) const;
  int size() const { return static_cast<int>(tenant_of_.size()); }

 private:
  std::map<std::string, std::deque<uint64_t>> waiting_;  // tenant -> tickets, oldest first
  std::map<uint64_t, std::string> tenant_of_;
  std::map<std::string, uint64_t>
      last_served_;  // waiting tenant -> serve count when last served (or joined)
  uint64_t next_ticket_ = 1;
  uint64_t serves_ = 0;
};

}  // namespace lact::server

#endif  // LACT_SERVER_FAIR_LINE_H_
