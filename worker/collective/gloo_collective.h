// Collective over Gloo's TCP transport. The ranks meet through a
// gloo::rendezvous::Store (in production the coordinator's KV, in tests an
// in-process HashStore); `prefix` keeps groups (and the two channels of one
// runner) apart in that store. Gloo's exceptions become statuses:
// DEADLINE_EXCEEDED on a timeout, UNAVAILABLE when a peer is gone.
//
// A Gloo pair takes the first connection that reaches its listening port,
// and Gloo authenticates none. So a mesh is used only once every rank has
// sent every peer a key drawn for it (published in the store) over the mesh,
// checked what each peer sent, and all ranks have said through the store
// that every pair connected and checked; otherwise every rank drops the mesh
// and builds a new one, up to 4 times (the log's gloo_mesh_retry).
//
// The process must ignore SIGPIPE (lact's mains do, in BlockStopSignals):
// Gloo writes with writev, and a peer that closes its end while a rank
// writes would otherwise end the process instead of failing the collective.
#ifndef LACT_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_
#define LACT_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/timing.h"
#include "worker/collective/collective.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace lact {

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // address this rank listens on
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};

class GlooCollective final : public Collective {
 public:
  // Blocks until all `size` ranks have connected and checked their mesh (or
  // the timeout passes: DEADLINE_EXCEEDED; UNAVAILABLE after 4 meshes that
  // failed their check).
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Connect(gloo::rendezvous::Store& store,
                                                                 const std::string& prefix,
                                                                 int rank, int size,
                                                                 const GlooOptions& options);
  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status AllGather(const float* in, size_t count, float* out) override;

 private:
  GlooCollective(std::shared_ptr<gloo::Context> context, int rank, int size)
      : context_(std::move(context)), rank_(rank), size_(size) {}

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
};

}  // namespace lact

#endif  // LACT_WORKER_COLLECTIVE_GLOO_COLLECTIVE_H_
