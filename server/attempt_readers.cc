#include "server/attempt_readers.h"

#include <thread>

namespace lact::server {

std::vector<v1::ShardDone> AttemptReaders::ReadAll() {
  std::vector<v1::ShardDone> dones(streams_->size());
  std::vector<std::thread> readers;
  for (int r = 1; r < streams_->size(); ++r)
    readers.emplace_back([this, r, &dones] { dones[r] = ReadRank(r); });
  dones[0] = ReadRank(0);
  for (std::thread& t : readers) t.join();
  return dones;
}

v1::ShardDone AttemptReaders::ReadRank(int rank) {
  v1::ShardDone done;
  v1::RunShardResponse response;
  while (streams_->Read(rank, &response)) {
    if (response.has_layers_done()) {
      if (events_.layers_done) events_.layers_done(response.layers_done());
    } else if (response.kind_case() == v1::RunShardResponse::kInLine) {
      if (events_.in_line) events_.in_line(streams_->address(rank));
    } else if (response.has_done()) {
      done = response.done();
    } else if (response.kind_case() == v1::RunShardResponse::kSpooled) {
      bool all_spooled;
      {
        absl::MutexLock lock(&mu_);
        all_spooled = ++spooled_ranks_ == streams_->size();
      }
      if (all_spooled && events_.all_spooled) events_.all_spooled();
    }
  }
  const RankEnd end = streams_->Finish(rank);
  {
    absl::MutexLock lock(&mu_);
    ++ranks_ended_;
  }
  if (!end.status.ok() && events_.rank_failed) events_.rank_failed(end);
  if (!machine_->RankEnded(rank, end)) return done;
  const absl::StatusCode code = end.status.code();
  if (end.from_worker &&
      (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded)) {
    AwaitPeers();
  }
  streams_->Cancel();  // the others cannot finish without this rank
  return done;
}

void AttemptReaders::AwaitPeers() {
  bool all_spoke;
  {
    absl::MutexLock lock(&mu_);
    auto all_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ranks_ended_ == streams_->size();
    };
    all_spoke = mu_.AwaitWithTimeout(absl::Condition(&all_ended), kPeerGrace);
  }
  // A peer neither finished nor went away: it stalled (stopped, wedged).
  if (!all_spoke) machine_->PeersSilent();
}

}  // namespace lact::server
