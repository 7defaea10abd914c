// What a rendezvous store (gloo::rendezvous::Store, whose interface reports
// failures by exception) throws when the keys it waits for do not come in
// time (RendezvousTimeout: the collectives turn it into DEADLINE_EXCEEDED)
// and when the store itself cannot be reached (RendezvousUnavailable: its
// coordinator stopped; UNAVAILABLE, so the job runs again). Gloo itself has
// no such types; its own stores' and transport's timeouts are
// gloo::IoExceptions that say "Timed out".
#ifndef LACT_WORKER_COLLECTIVE_RENDEZVOUS_TIMEOUT_H_
#define LACT_WORKER_COLLECTIVE_RENDEZVOUS_TIMEOUT_H_

#include <stdexcept>
#include <string>

namespace lact {

class RendezvousTimeout : public std::runtime_error {
 public:
  explicit RendezvousTimeout(const std::string& what) : std::runtime_error(what) {}
};

class RendezvousUnavailable : public std::runtime_error {
 public:
  explicit RendezvousUnavailable(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_RENDEZVOUS_TIMEOUT_H_
