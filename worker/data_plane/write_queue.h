// Items written in order on a thread of their own, so the thread that
// makes them does not wait for the disk: Put() queues an item (blocking
// only while `max_queued` items wait or are being written, when bounded)
// and the thread hands each to `write`. The first failed write ends the
// queue: the items still queued are dropped, Put returns the failure and
// Await says it. After each write, `done` (when given) gets the item back,
// outside the queue's lock, e.g. to reuse its buffer. The destructor stops
// the thread after the write in progress, dropping the rest.
#ifndef LACT_WORKER_DATA_PLANE_WRITE_QUEUE_H_
#define LACT_WORKER_DATA_PLANE_WRITE_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace lact {

template <typename Item>
class WriteQueue {
 public:
  using WriteFn = std::function<absl::Status(Item&)>;
  using DoneFn = std::function<void(Item&)>;

  // `max_queued` 0: Put never blocks.
  explicit WriteQueue(WriteFn write, size_t max_queued = 0, DoneFn done = nullptr)
      : write_(std::move(write)),
        done_(std::move(done)),
        max_queued_(max_queued),
        thread_([this] { Run(); }) {}
  ~WriteQueue() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // Queues `item`; the queue's failure (the item dropped) once a write failed.
  absl::Status Put(Item item) {
    absl::MutexLock lock(&mu_);
    if (max_queued_ > 0) mu_.Await(absl::Condition(this, &WriteQueue::HasRoomLocked));
    if (!failure_.ok() || stop_) return failure_;
    queued_.push_back(std::move(item));
    return absl::OkStatus();
  }
  // Waits until every item put is written, or one failed; the failure.
  absl::Status Await() const {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &WriteQueue::SettledLocked));
    return failure_;
  }
  // Without waiting: whether every item put is written, and none failed.
  bool AllWritten() const {
    absl::MutexLock lock(&mu_);
    return failure_.ok() && queued_.empty() && !writing_;
  }

 private:
  bool HasRoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_.size() + (writing_ ? 1 : 0) < max_queued_ || !failure_.ok() || stop_;
  }
  bool SettledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !failure_.ok() || (queued_.empty() && !writing_);
  }
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queued_.empty(); }

  void Run() {
    while (true) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &WriteQueue::WakeLocked));
        if (stop_) return;
        item = std::move(queued_.front());
        queued_.pop_front();
        writing_ = true;
      }
      const absl::Status written = write_(item);
      if (done_) done_(item);
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!written.ok() && failure_.ok()) {
        failure_ = written;
        queued_.clear();
      }
    }
  }

  const WriteFn write_;
  const DoneFn done_;
  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<Item> queued_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_WRITE_QUEUE_H_
