// This worker's place in the coordinator's registry: Register once it
// serves (retrying while the coordinator comes up), heartbeats that report
// the results it dropped and the shards it holds (shard_board.h: dropping
// those the coordinator lets go, and those held past the grace) and
// register it again when the coordinator has forgotten it (a restart), and
// Leave (heartbeats stopped, deregistered) when it drains. A shard that
// becomes held is reported at once, not at the next beat.
#ifndef LACT_WORKER_MEMBERSHIP_H_
#define LACT_WORKER_MEMBERSHIP_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lact/v1/control.grpc.pb.h"
#include "worker/data_plane/retained_results.h"
#include "worker/shard_board.h"

namespace lact {

class Membership {
 public:
  // `request`: the address, metrics address, backend and models this
  // worker registers with. `results` reports what it dropped, `shards`
  // what it holds.
  Membership(std::shared_ptr<v1::ControlService::Stub> control, v1::RegisterRequest request,
             RetainedResults* results, ShardBoard* shards)
      : control_(std::move(control)),
        request_(std::move(request)),
        results_(results),
        shards_(shards) {}
  ~Membership() { Leave(); }

  // Registers (up to ~30 s while the coordinator is unreachable; at once
  // for a refused secret or request), then heartbeats on a thread of its
  // own. The worker's id.
  absl::StatusOr<std::string> Join();
  // Stops the heartbeats (at once, even between beats) and deregisters
  // (best effort, 2 s). Idempotent.
  void Leave();

 private:
  void Wake();
  absl::StatusOr<std::string> Register();
  void Heartbeats();
  void HeartbeatOnce();

  const std::shared_ptr<v1::ControlService::Stub> control_;
  const v1::RegisterRequest request_;
  RetainedResults* const results_;
  ShardBoard* const shards_;
  std::atomic<int> interval_ms_{1000};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::string id_ ABSL_GUARDED_BY(mu_);     // a re-registration changes it
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // beat now: stopping, or a shard became held
  std::vector<DroppedJob> unreported_;      // the heartbeat thread's
};

}  // namespace lact

#endif  // LACT_WORKER_MEMBERSHIP_H_
