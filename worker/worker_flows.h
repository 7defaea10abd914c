// The worker's three flows, each the body of one WorkerService call:
// RunShard runs one shard of a job's context with its group, its bytes
// moving over the shard's ShardTransfer (in band) or through files under
// the data root (by reference); rank 0 runs the job's query sets and keeps
// the fused state, and results sent in band are retained for a client
// that comes back. Shards compute one at a time, in the order they came
// (compute_line.h); one that comes while another computes is staged.
// A shard whose call ends runs on, held for the coordinator that takes the
// job back (AttachShard follows it again; shard_board.h). RunQuery runs
// query sets against a kept state. Each flow returns the status its call
// ends with; the call's end (a cancel) reaches it through the call.
#ifndef LACT_WORKER_WORKER_FLOWS_H_
#define LACT_WORKER_WORKER_FLOWS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "lact/v1/control.grpc.pb.h"
#include "lact/v1/worker.pb.h"
#include "proto/write_call.h"
#include "worker/backends.h"
#include "worker/data_plane/compute_line.h"
#include "worker/data_plane/retained_results.h"
#include "worker/data_plane/shard_transfer.h"
#include "worker/model_cache.h"
#include "worker/shard_board.h"
#include "worker/worker_metrics.h"

namespace lact {

using RunShardCall = WriteCall<v1::RunShardResponse>;
using RunQueryCall = WriteCall<v1::RunQueryResponse>;

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

// `*stats`: the shard's ShardDone, when it succeeds.
absl::Status RunShardFlow(const WorkerContext& w, const v1::RunShardRequest& request,
                          RunShardCall& call, v1::ShardDone* stats);
// Follows a held shard on `call`: its progress from where it stands, then
// its end.
absl::Status AttachShardFlow(const WorkerContext& w, const v1::AttachShardRequest& request,
                             RunShardCall& call);
// `*stats`: the query's ShardDone, when it succeeds.
absl::Status RunQueryFlow(const WorkerContext& w, const v1::RunQueryRequest& request,
                          RunQueryCall& call, v1::ShardDone* stats);

}  // namespace lact

#endif  // LACT_WORKER_WORKER_FLOWS_H_
