#include "worker/collective/group.h"

#include "common/status_macros.h"
#include "worker/collective/gloo_collective.h"

namespace lact {

absl::StatusOr<GlooGroup> JoinGlooGroup(const GroupSpec& group, const std::string& host) {
  GlooGroup g;
  if (group.size == 1) {
    g.sync = std::make_unique<LocalCollective>();
    g.grads = std::make_unique<LocalCollective>();
    return g;
  }
  if (group.store == nullptr)
    return absl::InternalError("a group of several ranks needs a rendezvous store");
  const GlooOptions options{host, group.timeout};
  LACT_ASSIGN_OR_RETURN(g.sync, GlooCollective::Connect(*group.store, group.prefix + "/sync",
                                                        group.rank, group.size, options));
  LACT_ASSIGN_OR_RETURN(g.grads, GlooCollective::Connect(*group.store, group.prefix + "/grads",
                                                         group.rank, group.size, options));
  return g;
}

}  // namespace lact
