// The group a shard's ranks form: where they meet and how long they wait
// for each other. A leaf, shared by the collectives that join the group and
// the runners that are given it.
#ifndef LACT_WORKER_COLLECTIVE_GROUP_SPEC_H_
#define LACT_WORKER_COLLECTIVE_GROUP_SPEC_H_

#include <chrono>
#include <string>

#include "common/timing.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace lact {

// The ranks meet through `store` under `prefix`.
struct GroupSpec {
  gloo::rendezvous::Store* store = nullptr;  // unused for a group of one
  std::string prefix;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_GROUP_SPEC_H_
