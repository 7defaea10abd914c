// A server-streaming call (the coordinator's WatchJob, the workers'
// FetchResult) on gRPC's callback API: its flow runs on a thread of its
// own over a blocking Write, and the call ends with the status the flow
// returns. The end of the call reaches the flow through an EndWatch, when
// it happens (call_state.h).
//
// Contract for a flow: Write is called from the flow's thread only; it
// blocks until gRPC has taken the message and returns false once the call
// has ended. The reactor deletes itself when gRPC is done with the call.
#ifndef LACT_PROTO_WRITE_CALL_H_
#define LACT_PROTO_WRITE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <utility>

#include "proto/call_state.h"

namespace lact {

template <typename Response>
class WriteCall final : public grpc::ServerWriteReactor<Response> {
 public:
  using Flow = std::function<grpc::Status(WriteCall& call)>;

  static WriteCall* Start(Flow flow) { return new WriteCall(std::move(flow)); }

  class EndWatch : public CallState::EndWatch {
   public:
    EndWatch(WriteCall* call, std::function<void()> on_end)
        : CallState::EndWatch(&call->state_, std::move(on_end)) {}
  };

  bool Write(const Response& response) {
    if (!state_.BeginWrite()) return false;
    this->StartWrite(&response);
    return state_.AwaitWrite();
  }
  bool ended() const { return state_.ended(); }

 private:
  explicit WriteCall(Flow flow) : flow_(std::move(flow)) {
    state_.StartFlow([this] { this->Finish(flow_(*this)); });
  }

  void OnWriteDone(bool ok) override { state_.WriteDone(ok); }
  void OnCancel() override { state_.Ended(); }
  void OnDone() override {
    state_.Done();
    delete this;
  }

  const Flow flow_;
  CallState state_;
};

}  // namespace lact

#endif  // LACT_PROTO_WRITE_CALL_H_
