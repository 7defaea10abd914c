// What a blocking view of a server call on gRPC's callback API keeps (see
// stream_call.h and write_call.h, its two users): the thread the call's
// flow runs on, one pending read and one pending write that the flow waits
// for, and the call's end (OnCancel), which reaches the flow through an
// EndWatch when it happens: no thread polls for it.
//
// Contract: the reactor calls ReadDone, WriteDone, Ended and Done from its
// callbacks; the flow calls BeginRead/AwaitRead and BeginWrite/AwaitWrite
// around its StartRead/StartWrite, from its own thread, one at a time.
#ifndef LACT_PROTO_CALL_STATE_H_
#define LACT_PROTO_CALL_STATE_H_

#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lact {

class CallState {
 public:
  // Runs `body` on the flow's thread. The thread waits for the lock, so the
  // thread is recorded before the body can end the call (and Done read it).
  void StartFlow(std::function<void()> body) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    flow_thread_ = std::thread([this, body = std::move(body)] {
      { absl::MutexLock gate(&mu_); }
      body();
    });
  }

  // False if the call has ended (or, for reads, the client's messages
  // have); otherwise the flow starts the operation, then awaits it.
  bool BeginRead() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (ended_ || reads_done_) return false;
    read_complete_ = false;
    return true;
  }
  bool AwaitRead() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&read_complete_));
    return read_ok_;
  }
  bool BeginWrite() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    write_complete_ = false;
    return true;
  }
  bool AwaitWrite() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&write_complete_));
    return write_ok_;
  }

  void ReadDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    read_ok_ = ok;
    reads_done_ = !ok;
    read_complete_ = true;
  }
  void WriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    write_complete_ = true;
  }

  // The call ended: runs the watch's `on_end` outside the lock (it may take
  // the flow's locks).
  void Ended() ABSL_LOCKS_EXCLUDED(mu_) {
    std::function<void()> on_end;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      on_end = std::exchange(on_end_, nullptr);
      on_end_idle_ = on_end == nullptr;
    }
    if (!on_end) return;
    on_end();
    absl::MutexLock lock(&mu_);
    on_end_idle_ = true;
  }

  // gRPC is done with the call: the flow has called Finish and is
  // returning (or Done runs on its thread).
  void Done() ABSL_LOCKS_EXCLUDED(mu_) {
    { absl::MutexLock lock(&mu_); }  // pairs with the gate in StartFlow
    if (!flow_thread_.joinable()) return;
    if (flow_thread_.get_id() == std::this_thread::get_id()) {
      flow_thread_.detach();
    } else {
      flow_thread_.join();
    }
  }

  // Whether the call has ended (cancelled, client gone, deadline passed).
  bool ended() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  // After the peer's messages stopped (a Read returned false): whether the
  // call ended, as opposed to the peer closing its side. gRPC may fail the
  // read before it reports the call's end, so when the messages stopped
  // short of what the flow expected (`short_of_expected`) this waits up to
  // 250 ms for that report.
  bool EndedAfterReads(bool short_of_expected) const ABSL_LOCKS_EXCLUDED(mu_) {
    return short_of_expected ? EndsWithin(absl::Milliseconds(250)) : ended();
  }
  // Whether the call has ended or ends within `wait`.
  bool EndsWithin(absl::Duration wait) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return ended_ || mu_.AwaitWithTimeout(absl::Condition(&ended_), wait);
  }

  // While the watch lives, `on_end` runs once when the call ends (at once,
  // on this thread, if it has). Destroying the watch waits for a running
  // `on_end`, so it may use what the watch's scope owns.
  class EndWatch {
   public:
    EndWatch(CallState* state, std::function<void()> on_end) : state_(state) {
      {
        absl::MutexLock lock(&state_->mu_);
        if (!state_->ended_) {
          state_->on_end_ = std::move(on_end);
          return;
        }
      }
      on_end();  // outside the lock, as Ended runs it
    }
    EndWatch(const EndWatch&) = delete;
    EndWatch& operator=(const EndWatch&) = delete;
    ~EndWatch() {
      absl::MutexLock lock(&state_->mu_);
      state_->on_end_ = nullptr;
      state_->mu_.Await(absl::Condition(&state_->on_end_idle_));
    }

   private:
    CallState* const state_;
  };

 private:
  std::thread flow_thread_;  // set under mu_ in StartFlow
  mutable absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_end_ ABSL_GUARDED_BY(mu_);
  bool on_end_idle_ ABSL_GUARDED_BY(mu_) = true;  // Ended is not running on_end
  bool read_complete_ ABSL_GUARDED_BY(mu_) = true;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_complete_ ABSL_GUARDED_BY(mu_) = true;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lact

#endif  // LACT_PROTO_CALL_STATE_H_
