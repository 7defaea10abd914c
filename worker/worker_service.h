// The Worker gRPC service (thin adapter): RunShard runs one shard of a
// job's context with its group (on the CPU or a GPU, worker/backends.h), its
// bytes moving over the shard's ShardTransfer (in band, the client's
// stream) or through files under the data root (by reference); rank 0
// runs the job's query sets and keeps the fused state. Results sent in
// band are retained too (retained_results.h), so a client that went away
// can fetch them, and a shard whose client went away still succeeds.
// RunQuery runs query sets against a kept state; Forget drops a job's.
// A shard whose RunShard call ends (its coordinator stopped) runs on, held
// for the coordinator that takes the job back (AttachShard; shard_board.h).
// Shards compute one at a time, in the order they came (compute_line.h);
// one that comes while another computes is staged: its tokens are taken
// ahead of its turn, up to the staging cap, and its group is joined, so
// its compute starts the moment the one before it ends. The streaming calls run on gRPC's callback
// API (proto/write_call.h): the coordinator's cancel reaches a shard when it happens, through the
// call's end, with no thread polling for it.
#ifndef LACT_WORKER_WORKER_SERVICE_H_
#define LACT_WORKER_WORKER_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/call_caps.h"
#include "lact/v1/control.grpc.pb.h"
#include "lact/v1/worker.grpc.pb.h"
#include "worker/backends.h"
#include "worker/compute_line.h"
#include "worker/model_cache.h"
#include "worker/retained_results.h"
#include "worker/shard_board.h"
#include "worker/shard_transfer.h"
#include "worker/worker_metrics.h"

namespace lact {

struct WorkerContext {
  ModelCache* models;
  std::shared_ptr<v1::ControlService::Stub> control;
  BackendOptions backend;
  std::string data_root;  // empty: no files by reference
  // The coordinator's spool folder as mounted here (shared with it; empty:
  // in-band contexts are not spooled, so such jobs cannot run again).
  std::string spool_dir;
  TransferBoard* transfers;
  RetainedResults* results;
  // What the coordinator presents on every Worker call (none when empty);
  // UNAUTHENTICATED otherwise.
  std::string cluster_secret;
  // Contexts received in band or read by reference go into transparent
  // huge pages (common/huge_pages.h); false: 4 KiB pages (--no-huge-pages).
  bool huge_pages = true;
  WorkerMetrics* metrics = nullptr;  // what Prometheus scrapes; none when null
  // Queries running here at once (each holds a thread while it waits for
  // the client's Transfer); more are RESOURCE_EXHAUSTED.
  int max_queries = 64;
  // The shards as their coordinator follows them (shard_board.h); null: a
  // board with no grace (a shard stops when its RunShard call ends).
  ShardBoard* shards = nullptr;
  // The shards' compute line and its staging cap; null: a line that stages
  // nothing.
  ComputeLine* line = nullptr;
};

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerService(WorkerContext context);

  grpc::ServerWriteReactor<v1::RunShardResponse>* RunShard(
      grpc::CallbackServerContext* context, const v1::RunShardRequest* request) override;
  grpc::ServerWriteReactor<v1::RunQueryResponse>* RunQuery(
      grpc::CallbackServerContext* context, const v1::RunQueryRequest* request) override;
  grpc::ServerUnaryReactor* Forget(grpc::CallbackServerContext* context,
                                   const v1::ForgetRequest* request,
                                   v1::ForgetResponse* response) override;
  grpc::ServerWriteReactor<v1::RunShardResponse>* AttachShard(
      grpc::CallbackServerContext* context, const v1::AttachShardRequest* request) override;

  // Takes no new shards or queries from now on (UNAVAILABLE, "draining");
  // those running go on.
  void Drain();
  // Waits until no shard or query runs, or `deadline`; false at the deadline.
  bool AwaitIdle(absl::Time deadline);

 private:
  absl::Status CheckCoordinator(const grpc::ServerContextBase& context) const;
  // A shard or query that counts as running while it lives; UNAVAILABLE
  // when the worker drains.
  absl::Status Enter();
  void Leave();

  WorkerContext w_;
  std::unique_ptr<ShardBoard> own_shards_;  // when the context gives none
  std::unique_ptr<ComputeLine> own_line_;   // likewise
  CallCaps queries_;                        // RunQuery calls running (one key: the worker's)
  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_WORKER_SERVICE_H_
