// The messages of one attempt of a job, made from its spec and plan: each
// rank's ShardSpec, the client's JobAccepted, and the job's statistics
// summed from its ranks' ShardDone; and a query's: its worker's header, its
// client's JobAccepted and its statistics. Pure functions, no I/O, but for
// the tickets' random bits.
#ifndef LACT_SERVER_JOB_MESSAGES_H_
#define LACT_SERVER_JOB_MESSAGES_H_

#include <chrono>
#include <string>
#include <vector>

#include "lact/v1/coordinator.pb.h"
#include "lact/v1/worker.pb.h"
#include "server/job_admission.h"
#include "server/job_files.h"

namespace lact::server {

// What one attempt's messages are made of.
struct AttemptFacts {
  const v1::JobSpec* spec;  // as admitted: files resolved, the tenant set
  const JobFiles* files;
  const JobPlan* plan;
  std::string job_id;
  int attempt = 0;           // 0, then one more per re-run
  std::string ticket;        // the client's Transfer streams', this attempt's
  std::string fetch_ticket;  // FetchResult's
  std::string spool_path;    // the in-band context's spool file, if any
  bool context_from_spool = false;
  std::chrono::seconds retain{0};
  int collective_timeout_ms = 0;
  std::chrono::milliseconds upload_idle_timeout{0};
};

// Whether rank r's client opens a Transfer stream (ShardSpec.transfer).
bool NeedsTransfer(const v1::JobSpec& spec, int rank);

// One ShardSpec per rank.
std::vector<v1::ShardSpec> ShardSpecs(const AttemptFacts& facts);

// What the client is told once every rank's stream is open, with
// `workers[r]` running rank r.
v1::SubmitResponse Accepted(const AttemptFacts& facts, const std::vector<std::string>& workers);

// The job's statistics from its ranks' ShardDone: the slowest rank's
// compute, upload and download, the all-reduce summed, each worker's peak
// RSS, each rank's worker's idle time before its compute; the rest of
// `*stats` is left as it was.
void AddShardStats(const std::vector<v1::ShardDone>& dones, const JobPlan& plan,
                   v1::JobStats* stats);

// 128 random bits as hex: the secret a client's Transfer and FetchResult
// streams present.
std::string NewTicket();

// What a query's messages are made of.
struct QueryFacts {
  const v1::QuerySpec* spec;  // as checked
  std::string worker;         // the address of the worker keeping the state
  std::string ticket;         // the client's Transfer stream's
  int32_t output_width = 0;
  std::chrono::milliseconds upload_idle_timeout{0};
};

// The header of the worker's RunQuery call.
v1::WorkerQueryHeader QueryHeader(const QueryFacts& facts);
// What the client is told: one shard, rank 0 on the worker keeping the
// state, with no context rows and only the query sets in band.
v1::JobAccepted QueryAccepted(const QueryFacts& facts);
// The query's statistics from its worker's ShardDone, `seconds` in all.
v1::JobStats QueryStats(const v1::ShardDone& done, double seconds);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_MESSAGES_H_
