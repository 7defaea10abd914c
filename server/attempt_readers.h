// Reads one attempt's rank streams to their ends and tells the job's
// machine (job_machine.h) how each ended: each rank on its own thread
// (rank 0 on the caller's), so that one that fails at once cancels the
// peers still waiting for it.
//
// Blame: a rank whose worker reports its group broken or timed out
// (UNAVAILABLE, DEADLINE_EXCEEDED) waits up to kPeerGrace for every peer's
// stream to end: a peer that died is about to say so, and is the one
// blamed; a peer that says nothing at all in that time has stalled
// (JobMachine::PeersSilent).
#ifndef LACT_SERVER_ATTEMPT_READERS_H_
#define LACT_SERVER_ATTEMPT_READERS_H_

#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lact/v1/worker.pb.h"
#include "server/job_machine.h"
#include "server/job_transport.h"

namespace lact::server {

inline constexpr absl::Duration kPeerGrace = absl::Seconds(1);

// What the readers report as they go. Each may be null.
struct AttemptEvents {
  // Rank 0 finished `layers` layers (on the caller's thread).
  std::function<void(int layers)> layers_done;
  // The rank's shard took its place in the line of its worker, at `address`.
  std::function<void(const std::string& address)> in_line;
  // Every rank has spooled its in-band context rows.
  std::function<void()> all_spooled;
  // A rank's stream ended with an error, before the machine hears of it:
  // the call's end, if it caused this, is looked for here.
  std::function<void(const RankEnd& end)> rank_failed;
};

class AttemptReaders {
 public:
  AttemptReaders(AttemptStreams* streams, JobMachine* machine, AttemptEvents events)
      : streams_(streams), machine_(machine), events_(std::move(events)) {}

  // Reads every rank to its end; their ShardDone, empty for a rank that
  // sent none.
  std::vector<v1::ShardDone> ReadAll();

 private:
  v1::ShardDone ReadRank(int rank);
  // The rank's group broke: waits up to kPeerGrace for every stream to end.
  void AwaitPeers();

  AttemptStreams* const streams_;
  JobMachine* const machine_;
  const AttemptEvents events_;
  absl::Mutex mu_;
  int ranks_ended_ ABSL_GUARDED_BY(mu_) = 0;
  int spooled_ranks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact::server

#endif  // LACT_SERVER_ATTEMPT_READERS_H_
