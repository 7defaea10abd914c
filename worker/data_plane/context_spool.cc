#include "worker/data_plane/context_spool.h"

#include <utility>

#include "common/log.h"

namespace lact {

ContextSpool::ContextSpool(TokenFileWriter file, int64_t context_begin)
    : file_(std::move(file)),
      context_begin_(context_begin),
      queue_([this](Chunk& c) { return Write(c); }, kMaxQueued, [this](Chunk& c) { Written(c); }) {}

ContextSpool::~ContextSpool() = default;

void ContextSpool::Add(int64_t offset, const std::vector<absl::string_view>& pieces,
                       std::shared_ptr<const void> owner) {
  Chunk chunk{.row = offset};
  if (owner != nullptr) {
    chunk.pieces = pieces;
    chunk.owner = std::move(owner);
  } else {
    {
      absl::MutexLock lock(&free_mu_);
      if (!free_.empty()) {
        chunk.bytes = std::move(free_.back());
        free_.pop_back();
      }
    }
    chunk.bytes.clear();
    for (absl::string_view piece : pieces) chunk.bytes.append(piece.data(), piece.size());
  }
  queue_.Put(std::move(chunk)).IgnoreError();  // a failed spool drops the rest
}

void ContextSpool::UploadEnded() { ended_ = true; }

bool ContextSpool::Complete() const { return ended_ && queue_.AllWritten(); }

absl::Status ContextSpool::Write(Chunk& chunk) {
  // A copied chunk's view is taken here: moving a short string moves its bytes.
  const absl::Status written = file_.Write(
      context_begin_ + chunk.row,
      chunk.owner == nullptr ? std::vector<absl::string_view>{chunk.bytes} : chunk.pieces);
  if (!written.ok()) {
    Log(LogLevel::kWarn, "spool_write_failed",
        {{"error", written.message()}, {"consequence", "the job cannot run again from its spool"}});
  }
  return written;
}

void ContextSpool::Written(Chunk& chunk) {
  if (chunk.owner != nullptr) {
    chunk.owner.reset();
    return;
  }
  absl::MutexLock lock(&free_mu_);
  if (free_.size() < kMaxQueued) free_.push_back(std::move(chunk.bytes));
}

}  // namespace lact
