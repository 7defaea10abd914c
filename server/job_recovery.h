// A coordinator started on the --state-dir of one that stopped (a restart,
// a rollout, kill -9) takes back the jobs that one left queued or running
// (JobStore::TakeRestored): each runs again on a thread of its own as its
// JobRun, from its JobRecord. A running job follows its attempt's shards
// again where they run on (they were held there meanwhile); when it cannot
// (a worker gone, a shard dropped or broken) it runs again as a job whose
// worker is gone does. Its client's Submit call ended with the last
// coordinator: the client follows the job with WatchJob, which gives it
// the ticket of any attempt started since.
#ifndef LACT_SERVER_JOB_RECOVERY_H_
#define LACT_SERVER_JOB_RECOVERY_H_

#include <vector>

#include "server/job_flows.h"
#include "server/job_store.h"

namespace lact::server {

// Before the coordinator serves: the rendezvous store takes the keys of
// every restored attempt (its shards may still be meeting), and the spool
// keeps the restored jobs' files (JobSpool::Open's `keep`).
void PrepareTakeBack(const std::vector<RestoredJob>& jobs, KvStore* kv);

// Starts each job's run on a detached thread. `coordinator`'s parts must
// outlive the process's serving (the coordinator stops by handing its jobs
// over to the next, never by destroying them under the runs).
void TakeBackJobs(const CoordinatorContext& coordinator, std::vector<RestoredJob> jobs);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_RECOVERY_H_
