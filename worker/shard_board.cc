#include "worker/shard_board.h"

#include "absl/strings/str_cat.h"

namespace lact {

void BoardShard::LayersDone(int layers) {
  absl::MutexLock lock(&mu_);
  view_.layers_done = layers;
}

void BoardShard::Spooled() {
  absl::MutexLock lock(&mu_);
  view_.spooled = true;
}

void BoardShard::End(absl::StatusOr<v1::ShardDone> outcome) {
  absl::MutexLock lock(&mu_);
  view_.ended = true;
  view_.outcome = std::move(outcome);
}

bool BoardShard::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void BoardShard::SetCancelAction(std::function<void()> cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancel) {
      mu_.Await(absl::Condition(
          +[](bool* cancelling) { return !*cancelling; }, &cancelling_));
      cancel_ = nullptr;
      return;
    }
    if (!dropped_) {
      cancel_ = std::move(cancel);
      return;
    }
  }
  cancel();
}

bool BoardShard::Follow() {
  absl::MutexLock lock(&mu_);
  if (followed_ || dropped_) return false;
  followed_ = true;
  return true;
}

void BoardShard::Unfollow() {
  absl::MutexLock lock(&mu_);
  followed_ = false;
  held_since_ = std::chrono::steady_clock::now();
}

void BoardShard::Delivered() {
  absl::MutexLock lock(&mu_);
  delivered_ = true;
  followed_ = false;  // a coordinator that missed the outcome may follow it again
}

ShardView BoardShard::Await(const ShardView& seen) {
  absl::MutexLock lock(&mu_);
  const uint64_t wakes = wakes_;
  const auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return view_.layers_done != seen.layers_done || view_.spooled != seen.spooled ||
           view_.ended != seen.ended || dropped_ || wakes_ != wakes;
  };
  mu_.Await(absl::Condition(&changed));
  return view_;
}

void BoardShard::Wake() {
  absl::MutexLock lock(&mu_);
  ++wakes_;
}

std::optional<std::chrono::steady_clock::time_point> BoardShard::held_since() const {
  absl::MutexLock lock(&mu_);
  if (followed_ || delivered_ || dropped_) return std::nullopt;
  return held_since_;
}

bool BoardShard::delivered() const {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

bool BoardShard::ended() const {
  absl::MutexLock lock(&mu_);
  return view_.ended;
}

void BoardShard::Drop() {
  std::function<void()> cancel;
  {
    absl::MutexLock lock(&mu_);
    dropped_ = true;
    cancel = std::move(cancel_);
    cancel_ = nullptr;
    if (cancel) cancelling_ = true;
  }
  if (!cancel) return;
  cancel();
  absl::MutexLock lock(&mu_);
  cancelling_ = false;
}

std::shared_ptr<BoardShard> ShardBoard::Begin(const ShardKey& key,
                                              const std::string& fetch_ticket) {
  auto shard = std::make_shared<BoardShard>(key, fetch_ticket);
  shard->Follow();
  absl::MutexLock lock(&mu_);
  shards_[key] = shard;
  return shard;
}

void ShardBoard::Finished(const std::shared_ptr<BoardShard>& shard) {
  const bool dropped = shard->dropped();
  {
    absl::MutexLock lock(&mu_);
    auto it = shards_.find(shard->key());
    if (it == shards_.end() || it->second != shard) return;
    // Held, or followed again (AttachShard): it stays until delivered.
    if (!dropped && grace_.count() > 0 && !shard->delivered()) return;
    shards_.erase(it);
    if (!dropped && grace_.count() > 0) RememberDeliveredLocked(shard);
  }
  if (dropped) forget_(*shard);
}

void ShardBoard::Remove(const std::shared_ptr<BoardShard>& shard) {
  absl::MutexLock lock(&mu_);
  auto it = shards_.find(shard->key());
  if (it == shards_.end() || it->second != shard) return;
  shards_.erase(it);
  if (grace_.count() > 0) RememberDeliveredLocked(shard);
}

void ShardBoard::RememberDeliveredLocked(std::shared_ptr<BoardShard> shard) {
  delivered_.emplace_back(std::chrono::steady_clock::now(), std::move(shard));
  if (delivered_.size() > kRememberedDelivered) delivered_.pop_front();
}

absl::StatusOr<std::shared_ptr<BoardShard>> ShardBoard::Find(const ShardKey& key) const {
  absl::MutexLock lock(&mu_);
  if (auto it = shards_.find(key); it != shards_.end()) return it->second;
  for (auto it = delivered_.rbegin(); it != delivered_.rend(); ++it) {
    if (it->second->key() == key) return it->second;
  }
  const std::string name = absl::StrCat("shard of job ", key.job_id, " (attempt ", key.attempt,
                                        ", rank ", key.rank, ")");
  for (auto it = drops_.rbegin(); it != drops_.rend(); ++it) {
    if (it->first == key)
      return absl::FailedPreconditionError(
          absl::StrCat("this worker dropped its ", name, ": ", it->second));
  }
  return absl::UnavailableError(absl::StrCat("this worker holds no ", name,
                                             ": it restarted since, or never ran that attempt"));
}

std::vector<v1::HeldShard> ShardBoard::Held() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::HeldShard> held;
  for (const auto& [key, shard] : shards_) {
    if (!shard->held_since()) continue;
    v1::HeldShard h;
    h.set_job_id(key.job_id);
    h.set_attempt(key.attempt);
    h.set_rank(key.rank);
    h.set_ended(shard->ended());
    held.push_back(std::move(h));
  }
  return held;
}

void ShardBoard::DropLocked(std::map<ShardKey, std::shared_ptr<BoardShard>>::iterator it,
                            const std::string& why,
                            std::vector<std::shared_ptr<BoardShard>>* dropped) {
  drops_.emplace_back(it->first, why);
  if (drops_.size() > kRememberedDrops) drops_.pop_front();
  dropped->push_back(it->second);
  // A shard still running leaves when its flow ends (Finished).
  if (it->second->ended()) shards_.erase(it);
}

void ShardBoard::AfterDrops(const std::vector<std::shared_ptr<BoardShard>>& dropped) {
  for (const std::shared_ptr<BoardShard>& shard : dropped) {
    shard->Drop();
    if (shard->ended()) forget_(*shard);
  }
}

void ShardBoard::Drop(const ShardKey& key, const std::string& why) {
  std::vector<std::shared_ptr<BoardShard>> dropped;
  {
    absl::MutexLock lock(&mu_);
    auto it = shards_.find(key);
    if (it == shards_.end() || !it->second->held_since()) return;
    DropLocked(it, why, &dropped);
  }
  AfterDrops(dropped);
}

void ShardBoard::DropExpired() {
  if (grace_.count() == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<BoardShard>> dropped;
  {
    absl::MutexLock lock(&mu_);
    while (!delivered_.empty() && now - delivered_.front().first >= grace_) delivered_.pop_front();
    for (auto it = shards_.begin(); it != shards_.end();) {
      auto next = std::next(it);
      std::optional<std::chrono::steady_clock::time_point> since = it->second->held_since();
      if (since && now - *since >= grace_) {
        DropLocked(it,
                   absl::StrCat("no coordinator followed it for ", grace_.count(),
                                " s, this worker's --coordinator-grace-seconds (the coordinator "
                                "was away longer)"),
                   &dropped);
      }
      it = next;
    }
  }
  AfterDrops(dropped);
}

void ShardBoard::OnHeld(std::function<void()> on_held) {
  absl::MutexLock lock(&mu_);
  on_held_ = std::move(on_held);
}

void ShardBoard::BecameHeld() {
  std::function<void()> on_held;
  {
    absl::MutexLock lock(&mu_);
    on_held = on_held_;
  }
  if (on_held) on_held();
}

}  // namespace lact
