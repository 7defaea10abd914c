// One Query call (coordinator.proto) on gRPC's callback API. The query
// sets go out in messages of whole rows under 4 MiB, each write started
// when the one before it completed; output chunks are placed into their
// sets as they come back. Await() blocks the calling thread until the call
// has ended; the call has no thread of its own.
#ifndef LACT_CLIENT_QUERY_CALL_H_
#define LACT_CLIENT_QUERY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.grpc.pb.h"

namespace lact {

class QueryCall final : public grpc::ClientBidiReactor<v1::QueryRequest, v1::QueryResponse> {
 public:
  // Starts the call. `queries` (set k + 1 = queries[k], all of one width)
  // and `ctx` must outlive Await().
  QueryCall(v1::Coordinator::Stub* stub, grpc::ClientContext* ctx, const v1::QuerySpec& spec,
            const std::vector<Tensor>& queries, WireType dtype);

  // The output of every query set, or why not.
  absl::StatusOr<std::vector<Tensor>> Await();

 private:
  // Starts the next chunk's write, or closes the writing side.
  void WriteNext();
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  absl::Status Place(const v1::OutputChunk& chunk);

  grpc::ClientContext* const ctx_;
  const std::vector<Tensor>& queries_;
  const WireType dtype_;
  // The writing side (one write at a time): the message in flight and the
  // rows that go next.
  v1::QueryRequest request_;
  size_t next_set_ = 0;
  int64_t next_row_ = 0;
  // The reading side (one read at a time), read by Await after the end.
  v1::QueryResponse response_;
  std::vector<Tensor> outputs_;
  absl::Status placed_;

  // Set by OnDone, then done_ (Await may destroy the call once it is).
  grpc::Status status_;
  absl::Notification done_;
};

}  // namespace lact

#endif  // LACT_CLIENT_QUERY_CALL_H_
