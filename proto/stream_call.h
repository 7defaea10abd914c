// A bidirectional server call (the coordinator's Submit and Query, the
// workers' RunShard, RunQuery and Transfer) on gRPC's callback API. The
// reactor reads the call's first message itself, so a peer that opens a
// call and sends nothing holds no thread. Then the call's flow runs on a
// thread of its own over a blocking view of the stream (Read, Write), and
// the call ends with the status the flow returns. The end of the call (the
// peer cancelled or went away, or its deadline passed) reaches the flow
// through an EndWatch, when it happens (call_state.h).
//
// Contract for a flow: Read and Write are called from the flow's thread
// only, one at a time; each blocks until gRPC has completed it and returns
// false once the peer's messages (Read) or the call (both) have ended.
// The reactor deletes itself when gRPC is done with the call.
#ifndef LACT_PROTO_STREAM_CALL_H_
#define LACT_PROTO_STREAM_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "proto/call_state.h"

namespace lact {

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
  bool ended() const { return state_.ended(); }
  bool EndedAfterReads(bool short_of_expected) const {
    return state_.EndedAfterReads(short_of_expected);
  }
  std::chrono::system_clock::time_point deadline() const { return context_->deadline(); }

 private:
  StreamCall(grpc::CallbackServerContext* context, std::string no_first_message, Flow flow)
      : context_(context), no_first_message_(std::move(no_first_message)), flow_(std::move(flow)) {
    this->StartRead(&first_);
  }

  void OnReadDone(bool ok) override {
    if (started_) {
      state_.ReadDone(ok);
      return;
    }
    started_ = true;
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, no_first_message_));
      return;
    }
    state_.StartFlow([this] { this->Finish(flow_(first_, *this)); });
  }
  void OnWriteDone(bool ok) override { state_.WriteDone(ok); }
  void OnCancel() override { state_.Ended(); }
  void OnDone() override {
    state_.Done();
    delete this;
  }

  grpc::CallbackServerContext* const context_;
  const std::string no_first_message_;
  const Flow flow_;
  Request first_;
  bool started_ = false;  // the first read has completed (reactor callbacks only)
  CallState state_;
};

}  // namespace lact

#endif  // LACT_PROTO_STREAM_CALL_H_
