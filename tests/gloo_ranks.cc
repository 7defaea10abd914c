#include "tests/gloo_ranks.h"

#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "worker/collective/gloo_collective.h"

namespace lact::testing {

std::vector<absl::Status> RunGlooRanks(
    int ranks, const std::function<absl::Status(int, Collective*, Collective*)>& fn) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto sync = GlooCollective::Connect(store, "sync", r, ranks, {});
      auto grads = GlooCollective::Connect(store, "grads", r, ranks, {});
      if (!sync.ok() || !grads.ok()) {
        statuses[r] = sync.ok() ? grads.status() : sync.status();
        return;
      }
      statuses[r] = fn(r, sync->get(), grads->get());
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

}  // namespace lact::testing
