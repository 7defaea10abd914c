// The coordinator's bidirectional calls (Submit, Query) on gRPC's callback
// API. The reactor reads the call's first message itself, so a client that
// opens a call and sends nothing holds no thread. Then the call's flow runs
// on a thread of its own over a blocking view of the stream (Read, Write),
// and the call ends with the status the flow returns. The end of the call
// (the client cancelled or went away, or its deadline passed) reaches the
// flow through OnCancel, when it happens: no thread polls for it.
//
// Contract for a flow: Read and Write are called from the flow's thread
// only, one at a time; each blocks until gRPC has completed it and returns
// false once the client's messages (Read) or the call (both) have ended.
// The reactor deletes itself when gRPC is done with the call.
#ifndef LACT_SERVER_STREAM_CALL_H_
#define LACT_SERVER_STREAM_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace lact::server {

template <typename Request, typename Response>
class StreamCall final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  using Flow = std::function<grpc::Status(const Request& first, StreamCall& call)>;

  // Starts the call: reads the first message, then runs `flow` with it.
  // A call that ends before its first message ends with INVALID_ARGUMENT
  // `no_first_message`.
  static StreamCall* Start(grpc::CallbackServerContext* context, std::string no_first_message,
                           Flow flow) {
    return new StreamCall(context, std::move(no_first_message), std::move(flow));
  }

  // While the watch lives, `on_end` runs once when the call ends (at once,
  // on this thread, if it has). Destroying the watch waits for a running
  // `on_end`, so it may use what the watch's scope owns.
  class EndWatch {
   public:
    EndWatch(StreamCall* call, std::function<void()> on_end) : call_(call) {
      {
        absl::MutexLock lock(&call_->mu_);
        if (!call_->ended_) {
          call_->on_end_ = std::move(on_end);
          return;
        }
      }
      on_end();  // outside the lock, as OnCancel runs it
    }
    EndWatch(const EndWatch&) = delete;
    EndWatch& operator=(const EndWatch&) = delete;
    ~EndWatch() {
      absl::MutexLock lock(&call_->mu_);
      call_->on_end_ = nullptr;
      call_->mu_.Await(absl::Condition(&call_->on_end_idle_));
    }

   private:
    StreamCall* call_;
  };

  bool Read(Request* request) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (ended_ || reads_done_) return false;
      read_complete_ = false;
    }
    this->StartRead(request);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&read_complete_));
    return read_ok_;
  }

  bool Write(const Response& response) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return false;
      write_complete_ = false;
    }
    this->StartWrite(&response);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&write_complete_));
    return write_ok_;
  }

  // Whether the call has ended (cancelled, client gone, deadline passed).
  bool ended() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  std::chrono::system_clock::time_point deadline() const { return context_->deadline(); }

 private:
  StreamCall(grpc::CallbackServerContext* context, std::string no_first_message, Flow flow)
      : context_(context), no_first_message_(std::move(no_first_message)), flow_(std::move(flow)) {
    this->StartRead(&first_);
  }

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    if (!started_) {
      started_ = true;
      if (!ok) {
        this->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, no_first_message_));
        return;
      }
      // The thread waits for the lock, so flow_thread_ is set before the
      // flow can end the call (and OnDone read it).
      absl::MutexLock lock(&mu_);
      flow_thread_ = std::thread([this] {
        { absl::MutexLock gate(&mu_); }
        this->Finish(flow_(first_, *this));
      });
      return;
    }
    absl::MutexLock lock(&mu_);
    read_ok_ = ok;
    reads_done_ = !ok;
    read_complete_ = true;
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    write_complete_ = true;
  }

  // Runs the watch's `on_end` outside the lock: it may take the flow's locks.
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_) {
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

  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);  // pairs with the gate in OnReadDone
    }
    if (flow_thread_.joinable()) {
      if (flow_thread_.get_id() == std::this_thread::get_id()) {
        flow_thread_.detach();
      } else {
        flow_thread_.join();  // it has called Finish: it is returning
      }
    }
    delete this;
  }

  grpc::CallbackServerContext* const context_;
  const std::string no_first_message_;
  const Flow flow_;
  Request first_;
  bool started_ = false;     // the first read has completed (reactor callbacks only)
  std::thread flow_thread_;  // set under mu_ in OnReadDone

  mutable absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_end_ ABSL_GUARDED_BY(mu_);
  bool on_end_idle_ ABSL_GUARDED_BY(mu_) = true;  // OnCancel is not running on_end
  bool read_complete_ ABSL_GUARDED_BY(mu_) = true;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_complete_ ABSL_GUARDED_BY(mu_) = true;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lact::server

#endif  // LACT_SERVER_STREAM_CALL_H_
