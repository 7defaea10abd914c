// One query against the fused state this worker kept for a job
// (WorkerService.RunQuery), with no call of its own: its sets come over the
// client's Transfer stream, a ShardTransfer registered on the TransferBoard
// as rank 0 of the job under the query's own ticket (the same road as a
// Submit's query sets), run on the worker's backend against the kept state,
// and their outputs go back on that stream. Nothing of a query is retained.
#ifndef LACT_WORKER_QUERY_RUN_H_
#define LACT_WORKER_QUERY_RUN_H_

#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "lact/v1/worker.pb.h"
#include "worker/backends.h"
#include "worker/data_plane/retained_results.h"
#include "worker/data_plane/shard_transfer.h"
#include "worker/model_cache.h"

namespace lact {

// Where a query runs: the worker's models, backend and kept results.
struct QueryPlace {
  ModelCache* models;
  BackendOptions backend;
  RetainedResults* results;
};

class QueryRun {
 public:
  // `cancelled` turns true when the coordinator ends the query; the caller
  // also cancels `transfer` then, which ends every wait here.
  QueryRun(QueryPlace place, const v1::WorkerQueryHeader& header, std::function<bool()> cancelled,
           std::shared_ptr<ShardTransfer> transfer)
      : place_(place),
        header_(header),
        cancelled_(std::move(cancelled)),
        transfer_(std::move(transfer)) {}

  // Checks the header against what is kept (the state is rank 0's, the
  // width the model's), waits for the sets, runs them and waits until the
  // client took every output. ShardDone's upload, compute and download
  // times, bytes and peak RSS describe the query.
  absl::StatusOr<v1::ShardDone> Run();

 private:
  std::chrono::milliseconds IdleTimeout() const;

  const QueryPlace place_;
  const v1::WorkerQueryHeader& header_;
  const std::function<bool()> cancelled_;
  std::shared_ptr<ShardTransfer> transfer_;
};

}  // namespace lact

#endif  // LACT_WORKER_QUERY_RUN_H_
