// What this worker keeps of the jobs it computed, until their TTL and
// within byte caps, one in all and one per tenant: the outputs it sent in
// band (for FetchResult, so a client that went away loses nothing; once
// they reached the client, only for a short grace) and, on rank 0, the
// query outputs and the fused state (for FetchResult and RunQuery; the
// state stays where it was computed until a query needs it). A Put that
// would pass its tenant's cap evicts that tenant's oldest jobs; one that
// would pass the worker's cap evicts the oldest jobs of the tenant that
// holds the most (counting the new job's), so no tenant's results push
// out those of a tenant that holds less. A job whose results alone exceed
// a cap is not kept. Expired jobs are dropped on every Put and Get; a Get
// for an evicted, expired, forgotten or unkept job says which (the last
// 4,096 such jobs are remembered), and TakeDropped hands each drop to the
// coordinator once. Thread-safe.
#ifndef LACT_WORKER_DATA_PLANE_RETAINED_RESULTS_H_
#define LACT_WORKER_DATA_PLANE_RETAINED_RESULTS_H_

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/fused_state.h"
#include "lact/v1/common.pb.h"
#include "worker/data_plane/result_item.h"

namespace lact {

struct RetainedResult {
  std::string tenant;
  std::string model;
  v1::JobOptions options;
  std::string ticket;  // the job's; FetchResult must present it
  int rank = 0;
  std::shared_ptr<const FusedState> state;  // rank 0 only, else null
  std::vector<ResultItem> outputs;          // in-band output rows and query outputs
  // Why the context's outputs (set 0) are no longer in `outputs`, if they
  // were kept; the query outputs and state stay.
  std::string outputs_dropped;
};

// A job whose retained results were dropped, for the coordinator.
struct DroppedJob {
  std::string job_id;
  bool state = false;  // its fused state went too
  std::string why;     // as Get says it: "evicted: ...", "expired: ..."
};

class RetainedResults {
 public:
  explicit RetainedResults(int64_t max_bytes = int64_t{8} << 30, int64_t max_tenant_bytes = -1)
      : max_bytes_(max_bytes),
        max_tenant_bytes_(max_tenant_bytes < 0 ? max_bytes : max_tenant_bytes) {}

  // Keeps the job's results for `ttl`, evicting others as the class says
  // to stay within the caps; RESOURCE_EXHAUSTED (and nothing kept) if they
  // alone exceed one.
  absl::Status Put(const std::string& job_id, RetainedResult result, std::chrono::seconds ttl);
  // NOT_FOUND when this worker holds nothing of the job: never computed
  // here, expired, evicted by the byte cap, or forgotten (the message says
  // which).
  absl::StatusOr<RetainedResult> Get(const std::string& job_id);
  // The job's outputs reached its client: the context's are kept `grace`
  // longer (a client that died with the last messages in flight can still
  // fetch them), the query outputs and fused state until the TTL.
  void Delivered(const std::string& job_id, std::chrono::seconds grace);
  // The job ran here but keeps nothing (it failed or was cancelled): Get
  // says `why` rather than "never computed here".
  void NotKept(const std::string& job_id, const std::string& why);
  // The jobs dropped since the last call, each once.
  std::vector<DroppedJob> TakeDropped();
  // Drops the job's results; false if there were none, PERMISSION_DENIED
  // if `ticket` is not the job's.
  absl::StatusOr<bool> Forget(const std::string& job_id, const std::string& ticket);
  int64_t bytes();  // after dropping what expired

 private:
  struct Entry {
    RetainedResult result;
    std::chrono::steady_clock::time_point expires;
    std::chrono::steady_clock::time_point outputs_expire =
        std::chrono::steady_clock::time_point::max();
    int64_t bytes = 0;
    uint64_t order = 0;  // of its Put, for eviction oldest first
  };
  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job's results; `report`: TakeDropped will hand the drop on
  // (not for drops the coordinator asked for).
  void DropLocked(std::map<std::string, Entry>::iterator it, const std::string& why,
                  bool report = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remember(const std::string& job_id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The jobs' iterator to evict first for a Put of `bytes` by `tenant`, or
  // end() when nothing need go; `why` says why it goes.
  std::map<std::string, Entry>::iterator VictimLocked(const std::string& tenant, int64_t bytes,
                                                      std::string* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  const int64_t max_tenant_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> tenant_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<DroppedJob> to_report_ ABSL_GUARDED_BY(mu_);
  uint64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> dropped_ ABSL_GUARDED_BY(mu_);  // job -> why, the last few
  std::deque<std::string> dropped_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_RETAINED_RESULTS_H_
