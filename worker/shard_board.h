// The shards of this worker as their coordinator follows them, by job,
// attempt and rank. A shard's RunShard call is how its coordinator follows
// it; when that call ends before the shard's outcome went out on it (the
// coordinator stopped or was killed, or let the shard go), the shard is
// held: it runs on, and keeps its outcome, until a coordinator says what
// becomes of it. Membership reports the held shards with every heartbeat
// (at once when one becomes held); the coordinator answers which to drop
// (the job was cancelled, ended, or runs again elsewhere), and a restarted
// coordinator that took the job back follows the others again
// (WorkerService.AttachShard). A held shard that no coordinator follows
// within the grace is dropped: cancelled, what it kept forgotten, and the
// reason remembered for a later AttachShard.
//
// Thread-safe. Each shard's own thread reports its progress and its end;
// a follower's thread waits for them.
#ifndef LACT_WORKER_SHARD_BOARD_H_
#define LACT_WORKER_SHARD_BOARD_H_

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lact/v1/control.pb.h"
#include "lact/v1/worker.pb.h"

namespace lact {

struct ShardKey {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  bool operator<(const ShardKey& o) const {
    return std::tie(job_id, attempt, rank) < std::tie(o.job_id, o.attempt, o.rank);
  }
  bool operator==(const ShardKey& o) const {
    return job_id == o.job_id && attempt == o.attempt && rank == o.rank;
  }
};

// One shard's progress and outcome, as a follower sees them.
struct ShardView {
  int layers_done = 0;
  bool spooled = false;
  bool ended = false;
  absl::StatusOr<v1::ShardDone> outcome = absl::UnknownError("running");
};

class BoardShard {
 public:
  BoardShard(ShardKey key, std::string fetch_ticket)
      : key_(std::move(key)), fetch_ticket_(std::move(fetch_ticket)) {}
  const ShardKey& key() const { return key_; }
  const std::string& fetch_ticket() const { return fetch_ticket_; }

  // --- the shard's own thread ---
  void LayersDone(int layers);
  void Spooled();
  void End(absl::StatusOr<v1::ShardDone> outcome);
  // Whether the shard was dropped (it stops as if cancelled).
  bool dropped() const;
  // What dropping it does while it runs (cancel its work); runs at once if
  // it was dropped already. Cleared (nullptr) before what it touches goes:
  // clearing it waits for a run of it that a Drop began.
  void SetCancelAction(std::function<void()> cancel);

  // --- followers ---
  // Takes the shard for a follower: false if another follows it, or it was
  // dropped.
  bool Follow();
  // The follower's call ended: the shard is held from now (unless it was
  // delivered).
  void Unfollow();
  // The follower delivered the shard's outcome: nothing is held.
  void Delivered();
  // Waits until the view differs from `seen`, `Wake()` is called, or the
  // shard is dropped; returns it.
  ShardView Await(const ShardView& seen);
  void Wake();

  // --- the board ---
  // Held: not followed and not delivered; since when.
  std::optional<std::chrono::steady_clock::time_point> held_since() const;
  bool ended() const;
  bool delivered() const;
  // Marks the shard dropped and runs its cancel action (outside the lock).
  void Drop();

 private:
  const ShardKey key_;
  const std::string fetch_ticket_;
  mutable absl::Mutex mu_;
  ShardView view_ ABSL_GUARDED_BY(mu_);
  bool followed_ ABSL_GUARDED_BY(mu_) = false;
  bool delivered_ ABSL_GUARDED_BY(mu_) = false;
  bool dropped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point held_since_ ABSL_GUARDED_BY(mu_);
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;  // a Drop runs cancel_'s last value
};

class ShardBoard {
 public:
  // What dropping a shard that ended does to what it kept (forget its
  // retained results), called outside the board's lock.
  using ForgetKept = std::function<void(const BoardShard&)>;
  // `grace`: how long a shard may be held with no coordinator following
  // it; 0 keeps no shard held (a shard whose call ends is dropped at once,
  // as a worker without a coordinator to report to needs).
  ShardBoard(std::chrono::seconds grace, ForgetKept forget)
      : grace_(grace), forget_(std::move(forget)) {}
  std::chrono::seconds grace() const { return grace_; }

  // A new shard, followed by its RunShard call.
  std::shared_ptr<BoardShard> Begin(const ShardKey& key, const std::string& fetch_ticket);
  // The shard's RunShard flow is over: a shard that was dropped leaves the
  // board (its kept results forgotten), one delivered is remembered as
  // such; one held stays for a coordinator to follow or drop.
  void Finished(const std::shared_ptr<BoardShard>& shard);
  // A follower delivered the outcome of a shard that had ended: it is
  // remembered as delivered.
  void Remove(const std::shared_ptr<BoardShard>& shard);
  // The shard under `key`, or why there is none: FAILED_PRECONDITION with
  // the reason it was dropped, UNAVAILABLE when this worker never had it.
  absl::StatusOr<std::shared_ptr<BoardShard>> Find(const ShardKey& key) const;

  // Every held shard, as heartbeats report them.
  std::vector<v1::HeldShard> Held() const;
  // Drops `key` (a coordinator's answer), remembering `why`.
  void Drop(const ShardKey& key, const std::string& why);
  // Drops every shard held for longer than the grace.
  void DropExpired();
  // Called (outside the lock) when a shard becomes held.
  void OnHeld(std::function<void()> on_held);
  void BecameHeld();

  // Dropped shards remembered for AttachShard's answer, and delivered ones
  // (for the grace: a coordinator that stopped after their outcome reached
  // it, before it recorded it, follows them again to the same outcome).
  static constexpr size_t kRememberedDrops = 1024;
  static constexpr size_t kRememberedDelivered = 1024;

 private:
  void DropLocked(std::map<ShardKey, std::shared_ptr<BoardShard>>::iterator it,
                  const std::string& why, std::vector<std::shared_ptr<BoardShard>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AfterDrops(const std::vector<std::shared_ptr<BoardShard>>& dropped);
  void RememberDeliveredLocked(std::shared_ptr<BoardShard> shard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::chrono::seconds grace_;
  const ForgetKept forget_;
  mutable absl::Mutex mu_;
  std::map<ShardKey, std::shared_ptr<BoardShard>> shards_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<ShardKey, std::string>> drops_ ABSL_GUARDED_BY(mu_);  // newest last
  // Delivered shards and when, newest last.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::shared_ptr<BoardShard>>>
      delivered_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_WORKER_SHARD_BOARD_H_
