// The client's side of a job's data plane: one ShardDataService.Transfer stream
// (data.proto) per shard that has bytes in band, each on its own thread,
// in the zero-copy message forms of proto/bulk_messages.h (float32 rows
// are sent from the context tensor itself).
// Each sends its ticket, its shard's context rows in the job's dtype (rank
// 0: then the query sets), closes its side, and places what comes back,
// outputs into `result->output` at their rows (disjoint per shard), query
// outputs into `result->queries` and state pieces into `result->state`
// (rank 0 only), or set 0's rows to an OutputTarget's rows as they come.
// Each stream's results must end with a TransferComplete whose count and
// CRC-32C match what arrived (data.proto); then the shard is complete
// whatever status its stream ends with. The
// output tensors are allocated, once, when the first stream has finished
// uploading (while the workers compute). Cancel() ends
// every stream; Join() returns the first failure.
// Fetch() instead reads a finished job's retained results back, the same
// way, with ShardDataService.FetchResult (nothing is uploaded).
#ifndef LACT_CLIENT_JOB_TRANSFERS_H_
#define LACT_CLIENT_JOB_TRANSFERS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>  // std::once_flag
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/job_io.h"
#include "lact/v1/data.pb.h"
#include "proto/bulk_messages.h"

namespace lact {

class JobTransfers {
 public:
  // `context` is null when no context rows are sent (a file by reference,
  // a spooled re-run, a query); `output` is where set 0's outputs go, null
  // when none come back (a query). All must outlive Join().
  // `credentials`: how to reach the workers (plaintext or TLS).
  JobTransfers(std::shared_ptr<grpc::ChannelCredentials> credentials,
               const v1::JobAccepted& accepted, const ContextInput* context,
               const std::vector<Tensor>& queries, const OutputTarget* output, JobResult* result);
  // For a finished job's results (JobInfo.accepted); `without_outputs`:
  // only rank 0's query outputs and fused state (the context's outputs are
  // gone, JobInfo.outputs_retained). The outputs go to `output` (which
  // must outlive Join()), or null: result->output.
  static std::unique_ptr<JobTransfers> Fetch(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                             const v1::JobAccepted& accepted, bool without_outputs,
                                             JobResult* result,
                                             const OutputTarget* output = nullptr);
  ~JobTransfers();

  // Starts the streams, each with `deadline`. `on_context_sent`, if set,
  // gets the context tokens sent so far over every stream, after each
  // message, from the streams' threads (one at a time per stream).
  void Start(std::chrono::system_clock::time_point deadline,
             std::function<void(int64_t)> on_context_sent = nullptr);
  void Cancel();
  absl::Status Join();

 private:
  absl::Status RunShard(int rank, grpc::ClientContext* ctx);
  absl::Status FetchShard(int rank, grpc::ClientContext* ctx);
  // Reads a stream's results into `result_`; then ends the stream.
  template <typename Stream>
  absl::Status Receive(int rank, Stream* stream, grpc::ClientContext* ctx);
  absl::Status Upload(int rank, grpc::ClientReaderWriter<BulkOut, TransferResponseIn>* stream);
  absl::Status Place(int rank, const TransferResponseIn& response);
  // An output chunk of set 0 to the shard's writer from output_rows_.
  absl::Status PlaceStreamed(int rank, const v1::TokenChunk& head,
                             const TransferResponseIn& response);
  void AllocateOutputs();

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const v1::JobAccepted accepted_;
  const ContextInput* context_;
  const std::vector<Tensor>& queries_;
  const bool output_in_band_;            // set 0's outputs come back
  const OutputRowsTarget* output_rows_;  // where they go as they come; null: below
  float* const output_buffer_;           // the caller's rows; null: result_->output
  bool fetch_ = false;
  bool without_outputs_ = false;  // fetch only rank 0's query outputs and state
  JobResult* result_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::thread> threads_;
  std::vector<absl::Status> statuses_;
  std::once_flag allocated_;
  std::atomic<int64_t> tokens_sent_{0};
  std::function<void(int64_t)> on_context_sent_;
  // Per rank, from its thread only: the writer of its rows and the row it
  // takes next.
  std::vector<std::unique_ptr<RangeWriter>> row_writers_;
  std::vector<int64_t> next_row_;
};

}  // namespace lact

#endif  // LACT_CLIENT_JOB_TRANSFERS_H_
