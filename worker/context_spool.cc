#include "worker/context_spool.h"

#include <utility>

#include "common/log.h"

namespace lact {

ContextSpool::ContextSpool(TokenFileWriter file, int64_t context_begin)
    : file_(std::move(file)), context_begin_(context_begin), thread_([this] { Run(); }) {}

ContextSpool::~ContextSpool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ContextSpool::Add(int64_t offset, const std::vector<absl::string_view>& pieces,
                       std::shared_ptr<const void> owner) {
  Chunk chunk{.row = offset};
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ContextSpool* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->queued_.size() + (s->writing_ ? 1 : 0) < kMaxQueued || s->failed_ || s->stop_;
        },
        this));
    if (failed_ || stop_) return;
    if (owner == nullptr && !free_.empty()) {
      chunk.bytes = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (owner != nullptr) {
    chunk.pieces = pieces;
    chunk.owner = std::move(owner);
  } else {
    chunk.bytes.clear();
    for (absl::string_view piece : pieces) chunk.bytes.append(piece.data(), piece.size());
  }
  absl::MutexLock lock(&mu_);
  queued_.push_back(std::move(chunk));
}

void ContextSpool::UploadEnded() {
  absl::MutexLock lock(&mu_);
  ended_ = true;
}

bool ContextSpool::Complete() const {
  absl::MutexLock lock(&mu_);
  return ended_ && !failed_ && queued_.empty() && !writing_;
}

void ContextSpool::Run() {
  while (true) {
    Chunk chunk;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ContextSpool* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->queued_.empty() || s->stop_; },
          this));
      if (stop_) return;
      chunk = std::move(queued_.front());
      queued_.pop_front();
      writing_ = true;
    }
    // A copied chunk's view is taken here: moving a short string moves its bytes.
    const bool copied = chunk.owner == nullptr;
    const absl::Status written =
        file_.Write(context_begin_ + chunk.row,
                    copied ? std::vector<absl::string_view>{chunk.bytes} : chunk.pieces);
    if (!written.ok()) {
      Log(LogLevel::kWarn, "spool_write_failed",
          {{"error", written.message()},
           {"consequence", "the job cannot run again from its spool"}});
    }
    chunk.owner.reset();  // the slices go back before the chunk counts as written
    absl::MutexLock lock(&mu_);
    writing_ = false;
    failed_ = failed_ || !written.ok();
    if (copied && free_.size() < kMaxQueued) free_.push_back(std::move(chunk.bytes));
    if (failed_) queued_.clear();
  }
}

}  // namespace lact
