// C++ client of the coordinator's CoordinatorService and the workers'
// ShardDataService. Thread-safe. Every call carries a deadline (the timeout
// given, or its kind's default below); errors are statuses with the
// server's message. A job's bytes go straight to and from its workers, one
// Transfer stream (and thread) per shard; every message stays under 4 MiB.
// A Submit whose coordinator restarts mid-job (one that keeps its jobs) is
// made again with the same request_id and follows the same job; so is one
// whose coordinator went away before answering it, once one is back.
#ifndef LACT_CLIENT_LACT_CLIENT_H_
#define LACT_CLIENT_LACT_CLIENT_H_

#include <grpcpp/security/credentials.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/job_io.h"
#include "common/model_config.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.grpc.pb.h"

namespace lact {

// Deadlines of calls given no timeout (0). A Submit call's deadline also
// bounds its job (upload, time in line, compute, results), and its
// Transfer streams share it.
inline constexpr std::chrono::hours kDefaultJobTimeout{24};
inline constexpr std::chrono::hours kDefaultQueryTimeout{1};
inline constexpr std::chrono::hours kDefaultWatchTimeout{24};
inline constexpr std::chrono::hours kDefaultFetchTimeout{1};
inline constexpr std::chrono::seconds kUnaryTimeout{30};

struct SubmitOptions {
  std::string model;
  int workers = 0;                    // 0: all that hold the model
  std::vector<int64_t> shard_tokens;  // explicit split, or empty
  JobOptions options;
  WireType dtype = WireType::kF32;
  bool return_state = true;
  int64_t retain_seconds = 0;
  std::chrono::milliseconds timeout{0};  // 0: kDefaultJobTimeout
  // Where the context's outputs go (job_io.h): memory, rows as they
  // arrive, or a file the workers write.
  OutputTarget output = OutputTarget::Memory();
  // Return once the job is admitted (its id known), leaving it to run:
  // WatchJob follows it, FetchResult collects its results. Only for jobs
  // whose bytes all go by reference.
  bool detach = false;
  bool cancel_on_disconnect = false;  // JobSpec.cancel_on_disconnect
  std::string tenant;                 // JobSpec.tenant
};

// How a client proves itself and checks the cluster.
struct ClientSecurity {
  // The bearer token of a cluster that requires one (its coordinator's
  // --auth-tokens); "" for an open cluster.
  std::string token;
  // PEM CA certificates that sign the coordinator's and the workers'
  // certificates: calls then go over TLS; "" = plaintext.
  std::string tls_roots;
};

class LactClient {
 public:
  using ProgressFn = std::function<void(const v1::Progress&)>;

  explicit LactClient(const std::string& address, const ClientSecurity& security = {});

  // Runs a job on `context` (job_io.h: a tensor, which converts, a file
  // by reference, or a source of rows) with query sets in band. `progress`
  // and `on_accepted` are called from Submit's threads, one at a time;
  // `on_accepted` gets the job's id as soon as the job is admitted.
  absl::StatusOr<JobResult> Submit(const SubmitOptions& options, const ContextInput& context,
                                   const std::vector<Tensor>& queries,
                                   const ProgressFn& progress = nullptr,
                                   std::function<void(const std::string&)> on_accepted = nullptr);
  // Runs query sets against a finished job's retained state: the
  // coordinator names the worker that keeps it, and the sets and their
  // outputs move over one Transfer stream to and from that worker, as
  // Submit's do. The result holds `queries`, `shards` (that worker) and
  // `stats`. `timeout` 0: kDefaultQueryTimeout.
  absl::StatusOr<JobResult> Query(const std::string& job_id, const std::vector<Tensor>& queries,
                                  WireType dtype = WireType::kF32,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  absl::StatusOr<v1::JobInfo> GetJob(const std::string& job_id);
  // A finished job's results as its workers retained them (outputs sent in
  // band, query outputs, the fused state), fetched straight from them in
  // parallel. FAILED_PRECONDITION if the job did not succeed or its results
  // are gone (NOT_FOUND from a worker says why: expired, evicted, deleted).
  absl::StatusOr<JobResult> FetchResult(const std::string& job_id);
  // Follows a job until it ends (`on_change` sees every JobInfo the server
  // sends); returns the last, whose status is final. `timeout` 0:
  // kDefaultWatchTimeout (DEADLINE_EXCEEDED then; the job runs on).
  absl::StatusOr<v1::JobInfo> WatchJob(
      const std::string& job_id, const std::function<void(const v1::JobInfo&)>& on_change = nullptr,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  absl::StatusOr<std::vector<v1::JobInfo>> ListJobs();
  absl::StatusOr<v1::JobInfo> CancelJob(const std::string& job_id);
  absl::Status DeleteJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::ModelInfo>> ListModels();
  // Every worker the coordinator knows (address, backend, models, health, lease).
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();
  // The config of a model the cluster serves (NOT_FOUND naming the others;
  // a cluster that lists no model at all is asked again for up to 10 s:
  // its coordinator may have just started).
  absl::StatusOr<ModelConfig> FindModel(const std::string& model);
  // OK once the coordinator's channel is connected; UNAVAILABLE naming the
  // address when it is not within `timeout` (nothing listening there, or
  // a TLS cluster asked without --tls-ca). The calls above wait for the
  // channel on their own; this lets a command fail fast.
  absl::Status WaitUntilReachable(std::chrono::milliseconds timeout);

 private:
  // A finished job's results its workers kept, into `result` (outputs to
  // `output`): what a Submit call that followed its job through a
  // coordinator restart did not get over its transfers.
  absl::Status FetchKept(const v1::JobInfo& info, const OutputTarget& output, JobResult* result);
  // A call's answer said the coordinator keeps its jobs across restarts.
  void NoteKeepsJobs(grpc::ClientContext& ctx);
  // Whether the coordinator's channel is connected, trying until it is,
  // fails (nothing listens, a failed handshake) or `deadline` passes.
  bool ConnectedBy(std::chrono::system_clock::time_point deadline);

  std::string address_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // to the coordinator and the workers
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  // Set once an answer said the coordinator keeps its jobs across restarts
  // (movable, as the client is): only then is a Submit call lost mid-job
  // made again (one lost before any answer always is, within 30 s).
  std::unique_ptr<std::atomic<bool>> keeps_jobs_ = std::make_unique<std::atomic<bool>>(false);
};

// The JobSpec Submit sends for `options`, `context` and `queries`.
v1::JobSpec MakeJobSpec(const SubmitOptions& options, const ContextInput& context,
                        const std::vector<Tensor>& queries);

}  // namespace lact

#endif  // LACT_CLIENT_LACT_CLIENT_H_
