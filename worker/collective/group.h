// Joining a job's group over Gloo: two collectives of the same ranks, one
// for the small synchronous exchanges and one for the gradient all-reduce
// that runs beside them. A group of one gets LocalCollectives.
#ifndef LACT_WORKER_COLLECTIVE_GROUP_H_
#define LACT_WORKER_COLLECTIVE_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/collective/collective.h"
#include "worker/collective/group_spec.h"

namespace lact {

struct GlooGroup {
  std::unique_ptr<Collective> sync, grads;
};

absl::StatusOr<GlooGroup> JoinGlooGroup(const GroupSpec& group, const std::string& host);

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_GROUP_H_
