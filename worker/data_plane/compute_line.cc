#include "worker/data_plane/compute_line.h"

#include <algorithm>

namespace lact {

std::shared_ptr<ComputeLine::Place> ComputeLine::Join() {
  auto place = std::make_shared<Place>(this);
  absl::MutexLock lock(&mu_);
  line_.push_back(place.get());
  return place;
}

int64_t ComputeLine::staged_bytes() const {
  absl::MutexLock lock(&mu_);
  return staged_;
}

int64_t ComputeLine::peak_staged_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

int ComputeLine::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(line_.size());
}

void ComputeLine::RemoveLocked(Place* place, bool computed) {
  if (computed && IsFront(place)) last_compute_end_ = Clock::now();
  line_.erase(std::remove(line_.begin(), line_.end(), place), line_.end());
}

absl::Status ComputeLine::Place::AwaitTurn() {
  absl::MutexLock lock(&line_->mu_);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(line_->mu_) {
    return closed_ || line_->IsFront(this);
  };
  line_->mu_.Await(absl::Condition(&ready));
  if (closed_) return absl::CancelledError("the shard ended while it waited for its turn");
  had_turn_ = true;
  line_->staged_ -= staged_;  // the computing shard's bytes, no longer staged
  staged_ = 0;
  return absl::OkStatus();
}

double ComputeLine::Place::BeginCompute() {
  absl::MutexLock lock(&line_->mu_);
  if (!line_->last_compute_end_) return 0;
  return std::chrono::duration<double>(Clock::now() - *line_->last_compute_end_).count();
}

void ComputeLine::Place::EndTurn() {
  absl::MutexLock lock(&line_->mu_);
  line_->RemoveLocked(this, had_turn_);
}

absl::Status ComputeLine::Place::Admit(int64_t bytes) {
  absl::MutexLock lock(&line_->mu_);
  const auto admissible = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(line_->mu_) {
    return closed_ || had_turn_ || line_->IsFront(this) || line_->staged_ + bytes <= line_->cap_;
  };
  line_->mu_.Await(absl::Condition(&admissible));
  if (closed_) return absl::CancelledError("the shard ended while its tokens were staged");
  if (had_turn_ || line_->IsFront(this)) return absl::OkStatus();
  staged_ += bytes;
  line_->staged_ += bytes;
  line_->peak_ = std::max(line_->peak_, line_->staged_);
  return absl::OkStatus();
}

void ComputeLine::Place::CloseLocked() {
  closed_ = true;
  line_->staged_ -= staged_;  // the shard will not compute: its tokens are of no use
  staged_ = 0;
}

void ComputeLine::Place::Close() {
  absl::MutexLock lock(&line_->mu_);
  // Before its turn it leaves the line now, whatever its thread still
  // waits on (a group that cannot meet): the shards behind it go on.
  if (had_turn_) {
    CloseLocked();
  } else {
    LeaveLocked();
  }
}

bool ComputeLine::Place::had_turn() const {
  absl::MutexLock lock(&line_->mu_);
  return had_turn_;
}

void ComputeLine::Place::Leave() {
  absl::MutexLock lock(&line_->mu_);
  LeaveLocked();
}

void ComputeLine::Place::LeaveLocked() {
  if (left_) return;
  left_ = true;
  CloseLocked();
  line_->RemoveLocked(this, had_turn_);
}

}  // namespace lact
