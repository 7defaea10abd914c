// A server-streaming call (one request, a stream of responses: the
// coordinator's Submit, Query and WatchJob, the workers' RunShard, RunQuery
// and FetchResult) on gRPC's callback API: its flow runs on a thread of its
// own over a blocking Write, and the call ends with the status the flow
// returns, converted to gRPC's here (the call's edge) and nowhere before. The end of the call (the
// peer cancelled or went away, or its deadline passed) reaches the flow through an EndWatch, when
// it happens (call_state.h).
//
// Contract for a flow: Write is called from the flow's thread only; it
// blocks until gRPC has taken the message and returns false once the call
// has ended. The reactor deletes itself when gRPC is done with the call.
#ifndef LACT_PROTO_WRITE_CALL_H_
#define LACT_PROTO_WRITE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/call_state.h"
#include "proto/status_conversion.h"

namespace lact {

template <typename Response>
class WriteCall final : public grpc::ServerWriteReactor<Response> {
 public:
  using Flow = std::function<absl::Status(WriteCall& call)>;

  // `context` is the call's (for its deadline), `flow` its body.
  static WriteCall* Start(grpc::CallbackServerContext* context, Flow flow) {
    return new WriteCall(context, std::move(flow));
  }

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
  bool EndsWithin(absl::Duration wait) const { return state_.EndsWithin(wait); }
  std::chrono::system_clock::time_point deadline() const { return context_->deadline(); }
  // The deadline, at most a week from now: what the calls made on this
  // call's behalf inherit (a call without a deadline has an infinite one).
  std::chrono::system_clock::time_point capped_deadline() const {
    return std::min(deadline(), std::chrono::system_clock::now() + std::chrono::hours(24 * 7));
  }

 private:
  WriteCall(grpc::CallbackServerContext* context, Flow flow)
      : context_(context), flow_(std::move(flow)) {
    state_.StartFlow([this] { this->Finish(ToGrpcStatus(flow_(*this))); });
  }

  void OnWriteDone(bool ok) override { state_.WriteDone(ok); }
  void OnCancel() override { state_.Ended(); }
  void OnDone() override {
    state_.Done();
    delete this;
  }

  grpc::CallbackServerContext* const context_;
  const Flow flow_;
  CallState state_;
};

}  // namespace lact

#endif  // LACT_PROTO_WRITE_CALL_H_
