// A bidirectional server call (the workers' ShardDataService.Transfer,
// the one call whose client streams) on gRPC's callback API. The
// reactor reads the call's first message itself, so a peer that opens a
// call and sends nothing holds no thread. Then the call's flow runs on a
// thread of its own over a blocking view of the stream (Read, Write), and
// the call ends with the status the flow returns, converted to gRPC's here
// (the call's edge) and nowhere before. The end of the call (the
// peer cancelled or went away, or its deadline passed) reaches the flow
// through an EndWatch, when it happens (call_state.h).
//
// Contract for a flow: Read and Write are called from the flow's thread
// only, one at a time; each blocks until gRPC has completed it and returns
// false once the peer's messages (Read) or the call (both) have ended.
// The reactor deletes itself when gRPC is done with the call.
#ifndef LACT_PROTO_STREAM_CALL_H_
#define LACT_PROTO_STREAM_CALL_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/call_state.h"
#include "proto/status_conversion.h"

namespace lact {

// Bounds on the calls of one service that wait for their first message:
// how many may wait at once (more are refused with RESOURCE_EXHAUSTED) and
// for how long (then DEADLINE_EXCEEDED); each names its flag.
struct FirstMessageLimits {
  static constexpr int kDefaultMaxWaiting = 1024;
  static constexpr std::chrono::milliseconds kDefaultTimeout{30000};
  std::atomic<int> waiting{0};
  int max_waiting = kDefaultMaxWaiting;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

template <typename Request, typename Response>
class StreamCall final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  using Flow = std::function<absl::Status(const Request& first, StreamCall& call)>;

  // Starts the call: reads the first message, then runs `flow` with it.
  // A call that ends before its first message ends with INVALID_ARGUMENT
  // `no_first_message`. With `limits` (which must outlive the call), a
  // call beyond its limits ends as they say.
  static StreamCall* Start(grpc::CallbackServerContext* context, std::string no_first_message,
                           Flow flow, FirstMessageLimits* limits = nullptr) {
    return new StreamCall(context, std::move(no_first_message), std::move(flow), limits);
  }

  class EndWatch : public CallState::EndWatch {
   public:
    EndWatch(StreamCall* call, std::function<void()> on_end)
        : CallState::EndWatch(&call->state_, std::move(on_end)) {}
  };

  bool Read(Request* request) {
    if (!state_.BeginRead()) return false;
    this->StartRead(request);
    return state_.AwaitRead();
  }

  bool Write(const Response& response) {
    if (!state_.BeginWrite()) return false;
    this->StartWrite(&response);
    return state_.AwaitWrite();
  }

  // Ends the call from the server's side: pending and later reads and
  // writes fail, and the EndWatch runs.
  void Cancel() { context_->TryCancel(); }
  // The same, the peer getting `status` (from any thread): what the flow
  // returns afterwards is dropped.
  void EndWith(const absl::Status& status) {
    if (finished_.exchange(true)) return;
    state_.Ended();
    this->Finish(ToGrpcStatus(status));
  }
  bool ended() const { return state_.ended(); }
  bool EndsWithin(absl::Duration wait) const { return state_.EndsWithin(wait); }
  bool EndedAfterReads(bool short_of_expected) const {
    return state_.EndedAfterReads(short_of_expected);
  }
  std::chrono::system_clock::time_point deadline() const { return context_->deadline(); }
  // The deadline, at most a week from now: what the calls made on this
  // call's behalf inherit (a call without a deadline has an infinite one).
  std::chrono::system_clock::time_point capped_deadline() const {
    return std::min(deadline(), std::chrono::system_clock::now() + std::chrono::hours(24 * 7));
  }

 private:
  // Where the first-message alarm finds its call: cleared once the first
  // read completes or the call is done, so a late alarm touches nothing.
  struct Waiting {
    absl::Mutex mu;
    StreamCall* call ABSL_GUARDED_BY(mu) = nullptr;
  };

  StreamCall(grpc::CallbackServerContext* context, std::string no_first_message, Flow flow,
             FirstMessageLimits* limits)
      : context_(context), no_first_message_(std::move(no_first_message)), flow_(std::move(flow)) {
    if (limits != nullptr) {
      if (limits->waiting.fetch_add(1) >= limits->max_waiting) {
        limits->waiting.fetch_sub(1);
        this->Finish(grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat(limits->max_waiting,
                         " calls already wait for their first message, the most allowed "
                         "(--max-pending-calls)")));
        return;
      }
      limits_ = limits;
      waiting_ = std::make_shared<Waiting>();
      {
        absl::MutexLock lock(&waiting_->mu);
        waiting_->call = this;
      }
      alarm_.Set(std::chrono::system_clock::now() + limits->timeout,
                 [waiting = waiting_, timeout = limits->timeout](bool fired) {
                   absl::MutexLock lock(&waiting->mu);
                   if (fired && waiting->call != nullptr) waiting->call->TimeOut(timeout);
                 });
    }
    this->StartRead(&first_);
  }

  // No first message within `timeout` (the alarm's thread, Waiting::mu held).
  void TimeOut(std::chrono::milliseconds timeout) {
    timed_out_ = true;
    this->Finish(
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                     absl::StrCat("no first message within ", timeout.count(),
                                  " ms of opening the call (--first-message-timeout-ms)")));
  }

  // The call no longer waits for its first message; true if the alarm
  // already ended it.
  bool StopWaiting() {
    if (waiting_ == nullptr) return false;
    absl::MutexLock lock(&waiting_->mu);
    if (waiting_->call == nullptr) return timed_out_;
    waiting_->call = nullptr;
    limits_->waiting.fetch_sub(1);
    return timed_out_;
  }

  void OnReadDone(bool ok) override {
    if (started_) {
      state_.ReadDone(ok);
      return;
    }
    started_ = true;
    if (StopWaiting()) return;  // already finished by the alarm
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, no_first_message_));
      return;
    }
    state_.StartFlow([this] {
      const absl::Status status = flow_(first_, *this);
      if (!finished_.exchange(true)) this->Finish(ToGrpcStatus(status));
    });
  }
  void OnWriteDone(bool ok) override { state_.WriteDone(ok); }
  void OnCancel() override { state_.Ended(); }
  void OnDone() override {
    StopWaiting();
    state_.Done();
    delete this;
  }

  grpc::CallbackServerContext* const context_;
  const std::string no_first_message_;
  const Flow flow_;
  Request first_;
  bool started_ = false;  // the first read has completed (reactor callbacks only)
  FirstMessageLimits* limits_ = nullptr;
  std::shared_ptr<Waiting> waiting_;
  bool timed_out_ = false;             // written under waiting_->mu
  std::atomic<bool> finished_{false};  // the flow's Finish or EndWith's has been called
  grpc::Alarm alarm_;
  CallState state_;
};

}  // namespace lact

#endif  // LACT_PROTO_STREAM_CALL_H_
