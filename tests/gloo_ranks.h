// The ranks of a Gloo group as threads of this process, over 127.0.0.1: the
// distributed tests' way to run P workers without processes.
#ifndef LACT_TESTS_GLOO_RANKS_H_
#define LACT_TESTS_GLOO_RANKS_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "worker/collective/collective.h"

namespace lact::testing {

// Runs fn(rank, sync, grads) for every rank on its own thread, each with two
// fresh Gloo collectives of `ranks` ranks; returns each rank's status (a
// failure to connect included) once all have finished.
std::vector<absl::Status> RunGlooRanks(
    int ranks, const std::function<absl::Status(int, Collective*, Collective*)>& fn);

}  // namespace lact::testing

#endif  // LACT_TESTS_GLOO_RANKS_H_
