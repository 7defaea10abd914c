// The ShardDataService of a worker (data.proto; a thin adapter): a
// client's Transfer stream finds its shard on the TransferBoard by job,
// rank and ticket, sends the shard's tokens into it and takes back its
// outputs, query outputs and fused state, in messages of at most 4 MiB.
// FetchResult sends the same results again from RetainedResults, to a
// client that presents the job's ticket.
// Registered by hand rather than through the generated base class so that
// its messages are the zero-copy forms of proto/bulk_messages.h: received
// chunks are decoded straight from gRPC's slices, and sent rows are slices
// of the output tensors themselves. Both calls run on gRPC's callback API
// (proto/stream_call.h, proto/write_call.h): a stream that was opened and
// sent nothing holds no thread, and ends after `first_message_timeout`
// (at most `max_pending_calls` wait at once; more are RESOURCE_EXHAUSTED).
#ifndef LACT_WORKER_DATA_PLANE_DATA_SERVICE_H_
#define LACT_WORKER_DATA_PLANE_DATA_SERVICE_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include "lact/v1/data.pb.h"
#include "proto/bulk_messages.h"
#include "proto/stream_call.h"
#include "worker/data_plane/retained_results.h"
#include "worker/data_plane/shard_transfer.h"

namespace lact {

class DataService final : public grpc::Service {
 public:
  DataService(TransferBoard* board, RetainedResults* results, int max_pending_calls,
              std::chrono::milliseconds first_message_timeout);

  grpc::ServerBidiReactor<TransferRequestIn, BulkOut>* Transfer(
      grpc::CallbackServerContext* context);
  grpc::ServerWriteReactor<BulkOut>* FetchResult(grpc::CallbackServerContext* context,
                                                 const v1::FetchResultRequest& request);

 private:
  TransferBoard* board_;
  RetainedResults* results_;
  FirstMessageLimits first_message_;  // Transfer streams waiting for their ticket
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_DATA_SERVICE_H_
