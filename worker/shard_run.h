// One shard of a job on this worker, from its spec to its ShardDone, with
// no call of its own: its context read by reference or taken from the
// client's Transfer (ShardTransfer), its group joined through the
// rendezvous store, its layers run on the worker's backend, its outputs
// written to the output file or published to the client, and on rank 0
// its query sets run and the fused state kept (RetainedResults). What the
// coordinator hears as the shard goes (ShardReports) is the RunShard
// call's, in worker_service.cc; unit tests give their own.
#ifndef LACT_WORKER_SHARD_RUN_H_
#define LACT_WORKER_SHARD_RUN_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/model.h"
#include "lact/v1/worker.pb.h"
#include "worker/backends.h"
#include "worker/data_plane/compute_line.h"
#include "worker/data_plane/output_file_stream.h"
#include "worker/data_plane/retained_results.h"
#include "worker/data_plane/shard_transfer.h"
#include "worker/model_cache.h"
#include "worker/schedule/stage_profile.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace lact {

// How long the shard's group waits for its ranks: the spec's, or the default.
std::chrono::milliseconds CollectiveTimeout(const v1::ShardSpec& spec);

// What a shard tells its coordinator while it runs.
class ShardReports {
 public:
  virtual ~ShardReports() = default;
  // Rank 0 finished `layers` of the context's layers.
  virtual void LayersDone(int layers) = 0;
  // Every in-band context row of the shard is in the spool.
  virtual void Spooled() = 0;
};

// Where a shard runs: the worker's backend, files and kept results.
struct ShardPlace {
  BackendOptions backend;
  std::string data_root;  // files by reference
  std::string spool_dir;  // the coordinator's spool, as mounted here
  bool huge_pages = true;
  RetainedResults* results;
  gloo::rendezvous::Store* store;  // where the group meets; unused for a group of one
  // The shard's place in the worker's compute line (compute_line.h): its
  // context is taken and computed on its turn; null: at once.
  ComputeLine::Place* turn = nullptr;
};

class ShardRun {
 public:
  // `transfer`: the client's stream, for a shard with bytes in band (else
  // null). `cancelled` turns true when the coordinator ends the shard.
  ShardRun(ShardPlace place, const v1::ShardSpec& spec, JobModel job, ShardReports* reports,
           std::function<bool()> cancelled, std::shared_ptr<ShardTransfer> transfer)
      : place_(std::move(place)),
        spec_(spec),
        job_(std::move(job)),
        reports_(reports),
        cancelled_(std::move(cancelled)),
        transfer_(std::move(transfer)) {}

  absl::StatusOr<v1::ShardDone> Run();

 private:
  // Waits for the shard's turn on the worker (staged meanwhile).
  absl::Status AwaitTurn();
  absl::StatusOr<Tensor> ObtainContext();
  absl::StatusOr<std::unique_ptr<ShardRunner>> MakeRunner();
  absl::Status TakeOutputRows(RowSlice rows);
  void Keep(ResultItem item);
  absl::Status Deliver(ShardRunner& runner, FusedState state);
  absl::Status AwaitDelivery();
  void ReportSpooled();
  std::chrono::milliseconds IdleTimeout() const;

  const ShardPlace place_;
  const v1::ShardSpec& spec_;
  JobModel job_;
  ShardReports* const reports_;
  const std::function<bool()> cancelled_;
  std::shared_ptr<ShardTransfer> transfer_;
  v1::ShardDone done_;
  RetainedResult kept_{spec_.tenant(),
                       spec_.model(),
                       spec_.options(),
                       spec_.fetch_ticket(),
                       spec_.rank(),
                       nullptr,
                       {}};
  std::unique_ptr<OutputFileStream> output_file_;  // by reference
  StageProfile profile_;                           // the context's stages, logged
  int64_t output_bytes_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_output_;  // the first row's making
  bool spool_reported_ = false;
  bool context_done_ = false;  // its layers ran; what runs now is query sets
};

}  // namespace lact

#endif  // LACT_WORKER_SHARD_RUN_H_
