// A worker's compute, one shard at a time, in the order the shards joined
// the line. The coordinator leases a worker to a second job only once the
// first one's shards are in line on every worker they share (each shard
// says so first on its RunShard call), so every worker holds two jobs in
// the same order and no two groups wait on each other.
//
// A shard that joins while another computes is staged: it may take its
// in-band tokens ahead of its turn, into memory bounded by the worker's
// staging cap (--staging-bytes). A chunk that would take the staged bytes
// past the cap waits, its stream unread so that the client's sends block,
// until staged bytes are freed or its shard's turn comes; a shard's bytes
// stop counting as staged at its turn, and are freed at once when it
// leaves the line (cancelled, failed). Thread-safe.
#ifndef LACT_WORKER_DATA_PLANE_COMPUTE_LINE_H_
#define LACT_WORKER_DATA_PLANE_COMPUTE_LINE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace lact {

class ComputeLine {
 public:
  class Place;

  explicit ComputeLine(int64_t staging_cap_bytes) : cap_(staging_cap_bytes) {}

  // Takes the next place in line: its turn comes once every shard that
  // joined before it ended its compute or left.
  std::shared_ptr<Place> Join();

  int64_t cap() const { return cap_; }
  int64_t staged_bytes() const;
  // The most bytes ever staged at once (never above cap()).
  int64_t peak_staged_bytes() const;
  // Shards in line: the one computing and those waiting behind it.
  int size() const;

 private:
  friend class Place;
  using Clock = std::chrono::steady_clock;

  bool IsFront(const Place* place) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !line_.empty() && line_.front() == place;
  }
  // `computed`: the place had its turn (its end is the compute's end).
  void RemoveLocked(Place* place, bool computed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t cap_;
  mutable absl::Mutex mu_;
  std::deque<Place*> line_ ABSL_GUARDED_BY(mu_);  // front: the shard whose turn it is
  int64_t staged_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<Clock::time_point> last_compute_end_ ABSL_GUARDED_BY(mu_);
};

// One shard's place, from its RunShard's start to its compute's end.
class ComputeLine::Place {
 public:
  explicit Place(ComputeLine* line) : line_(line) {}
  ~Place() { Leave(); }
  Place(const Place&) = delete;
  Place& operator=(const Place&) = delete;

  // Blocks until the shard's turn; CANCELLED once closed.
  absl::Status AwaitTurn();
  // The shard's compute begins (on its turn): the seconds the worker's
  // compute stood idle since the last one ended (0 for the first).
  double BeginCompute();
  // The compute ended: the next shard's turn. Also Leave's.
  void EndTurn();
  // Before the shard takes `bytes` more of its tokens: OK at once on its
  // turn; while staged, blocks while they would take the staged bytes past
  // the cap, then counts them as staged. CANCELLED once closed.
  absl::Status Admit(int64_t bytes);
  // Wakes the place's waits with CANCELLED, now and from now on (the
  // shard was cancelled or failed); its staged bytes count no more. Before
  // its turn it also leaves the line at once, so the shards behind it never
  // wait on a thread that cannot end yet (a group whose peer is gone).
  void Close();
  // Leaves the line: closed, its staged bytes freed, its turn ended.
  void Leave();
  // Whether its turn came.
  bool had_turn() const;

 private:
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(line_->mu_);
  void LeaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(line_->mu_);

  ComputeLine* const line_;
  int64_t staged_ ABSL_GUARDED_BY(line_->mu_) = 0;
  bool had_turn_ ABSL_GUARDED_BY(line_->mu_) = false;
  bool closed_ ABSL_GUARDED_BY(line_->mu_) = false;
  bool left_ ABSL_GUARDED_BY(line_->mu_) = false;
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_COMPUTE_LINE_H_
