// A shard's in-band context rows on their way into the coordinator's
// spool file (ShardSpec.spool_path), written on a thread of their own so
// the upload does not wait for the disk: Add() queues a chunk (it blocks
// only while kMaxQueued chunks wait) and the thread writes them in order.
// A chunk that comes with its owner (the gRPC slices it was received in)
// is written from where it lies; one without is copied into one of a few
// reused buffers first. A failed write costs the spool, not the
// job (the job then cannot run again from it). Complete() says, without
// waiting, whether the upload ended and every row reached the file.
// Add and UploadEnded come from one thread (the Transfer's); Complete from
// any. The destructor stops the thread after the write in progress.
#ifndef LACT_WORKER_DATA_PLANE_CONTEXT_SPOOL_H_
#define LACT_WORKER_DATA_PLANE_CONTEXT_SPOOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/data_files.h"
#include "worker/data_plane/write_queue.h"

namespace lact {

class ContextSpool {
 public:
  static constexpr int kMaxQueued = 8;  // chunks of at most 4 MiB: 32 MiB at most

  // Rows of the shard whose first context token is `context_begin`.
  ContextSpool(TokenFileWriter file, int64_t context_begin);
  ~ContextSpool();
  ContextSpool(const ContextSpool&) = delete;
  ContextSpool& operator=(const ContextSpool&) = delete;

  // A chunk of whole rows, the first `offset` rows into the shard;
  // `owner`, when given, keeps `pieces` alive until they are written.
  void Add(int64_t offset, const std::vector<absl::string_view>& pieces,
           std::shared_ptr<const void> owner = nullptr);
  // No more rows come.
  void UploadEnded();
  bool Complete() const;

 private:
  struct Chunk {
    int64_t row = 0;
    std::vector<absl::string_view> pieces;
    std::shared_ptr<const void> owner;  // of `pieces`; null: the rows are in `bytes`
    std::string bytes;
  };
  absl::Status Write(Chunk& chunk);
  // After its write: the slices go back, a copy buffer is kept for reuse.
  void Written(Chunk& chunk);

  TokenFileWriter file_;  // the queue's thread's
  const int64_t context_begin_;
  absl::Mutex free_mu_;
  std::vector<std::string> free_ ABSL_GUARDED_BY(free_mu_);  // copy buffers to reuse
  std::atomic<bool> ended_{false};
  WriteQueue<Chunk> queue_;  // last: its thread writes with the rest
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_CONTEXT_SPOOL_H_
