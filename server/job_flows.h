// The two streaming flows of the coordinator, as plain functions over a
// call (proto/write_call.h): Submit (submit_flow.cc: admit, resolve files
// by reference, then the job's run, job_run.h: queue for workers, start
// the shards, relay progress, run again, record where results are kept;
// the job's stages and failure causes are its JobMachine's) and
// Query (query_flow.cc: the worker that keeps the job's state is told to
// expect the query, the client where to send it). Neither touches bulk
// bytes: clients move them straight to and from the workers (data.proto)
// or name files. A job outlives its
// Submit call unless JobSpec.cancel_on_disconnect says otherwise. Every
// failure ends the call with a status naming the problem and, for worker
// failures, the worker; the job record, the rendezvous keys and a partly
// written output file are cleaned up on every path.
#ifndef LACT_SERVER_JOB_FLOWS_H_
#define LACT_SERVER_JOB_FLOWS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "common/call_caps.h"
#include "common/log.h"
#include "common/timing.h"
#include "lact/v1/coordinator.grpc.pb.h"
#include "proto/write_call.h"
#include "server/coordinator_metrics.h"
#include "server/job_admission.h"
#include "server/job_spool.h"
#include "server/job_store.h"
#include "server/kv_store.h"
#include "server/tenant_tokens.h"
#include "server/worker_registry.h"
#include "server/worker_streams.h"

namespace lact::server {

struct CoordinatorOptions {
  AdmissionLimits limits;
  std::chrono::seconds default_retain{kDefaultRetain};
  std::chrono::milliseconds acquire_wait{std::chrono::hours(24 * 7)};  // longest time in the queue
  int max_queued_jobs = 256;  // jobs waiting for workers beyond which Submit is refused
  int collective_timeout_ms = static_cast<int>(kDefaultCollectiveTimeout.count());
  // Longest wait for a client's stream, and between its chunks.
  std::chrono::milliseconds upload_idle_timeout = kDefaultUploadIdleTimeout;
  std::string data_root;       // where files by reference may be; empty = none allowed
  bool tenant_folders = true;  // with tokens: each tenant's files in DATA_ROOT/TENANT
  // Query calls one tenant may have running at once (each holds a thread
  // here and on its worker while it waits for the client's Transfer).
  int max_queries_per_tenant = 16;
  int64_t max_job_records = 100000;         // records kept (ended jobs' dropped oldest first)
  int64_t max_workers = 10000;              // registry entries
  int max_reruns = 3;                       // attempts after the first, when a worker is gone
  int64_t drain_seconds = 60;               // on SIGTERM, the longest wait for running jobs
  std::string spool_dir;                    // in-band contexts kept for re-runs; empty = none
  int64_t spool_bytes = int64_t{64} << 30;  // the most the spool holds
  bool keeps_jobs = false;  // --state-dir: jobs outlive this process (job_recovery.h)
};

// What the coordinator's flows share: its registry, job store, KV,
// options and links, by pointer (main owns them).
struct CoordinatorContext {
  WorkerRegistry* registry;
  KvStore* kv;
  JobStore* jobs;
  CoordinatorOptions options;
  const TenantTokens* tenants;  // who may call the public service
  ClusterLink cluster;          // how to reach the workers
  // Set when the coordinator drains (SIGTERM): Submit is refused, running
  // jobs go on.
  const std::atomic<bool>* draining;
  JobSpool* spool;              // in-band contexts, for re-runs (job_spool.h)
  CoordinatorMetrics* metrics;  // what Prometheus scrapes (coordinator_metrics.h)
  CallCaps* queries = nullptr;  // running Query calls per tenant; none: uncapped
  // When it began to serve: its workers register within a few heartbeats.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

using SubmitCall = WriteCall<v1::SubmitResponse>;
using QueryCall = WriteCall<v1::QueryResponse>;

// What a request without its spec is told.
inline constexpr char kNoJobSpec[] =
    "SubmitRequest.spec is missing: a Submit call carries its JobSpec";
inline constexpr char kNoQuerySpec[] =
    "QueryRequest.spec is missing: a Query call carries its QuerySpec";

// A Submit or Query call ended with `status`: counted in the metrics, and
// logged (call_failed) when it is an error.
inline void ReportCallEnd(const CoordinatorContext& c, const char* method, const Caller& caller,
                          const std::string& job_id, const absl::Status& status) {
  if (c.metrics != nullptr) c.metrics->CallEnded(method, status.code());
  if (status.ok()) return;
  Log(LogLevel::kWarn, "call_failed",
      {{"method", method},
       {"tenant", caller.tenant},
       {"job", job_id},
       {"code", absl::StatusCodeToString(status.code())},
       {"message", status.message()}});
}

// The flows, run on their call's thread (proto/write_call.h) with its
// request, for an authenticated `caller`: a job Submit starts is
// the caller's tenant's; Query serves only the caller's jobs.
absl::Status HandleSubmit(const CoordinatorContext& coordinator, const Caller& caller,
                          const v1::SubmitRequest& request, SubmitCall& call);
absl::Status HandleQuery(const CoordinatorContext& coordinator, const Caller& caller,
                         const v1::QueryRequest& request, QueryCall& call);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_FLOWS_H_
