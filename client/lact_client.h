// C++ client of the lact Coordinator service. Every call carries a deadline
// when a timeout is given; errors come back as statuses with the server's
// message. Submit streams the upload from its own thread while it reads
// progress, outputs and state, so neither side ever waits on the other.
// A LactClient may be used from several threads.
#ifndef LACT_CLIENT_LACT_CLIENT_H_
#define LACT_CLIENT_LACT_CLIENT_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.grpc.pb.h"

namespace lact {

struct SubmitOptions {
  std::string model;
  int workers = 0;                   // 0: all that hold the model
  std::vector<int64_t> shard_tokens;  // explicit split, or empty
  JobOptions options;
  WireType dtype = WireType::kF32;
  bool return_state = true;
  int64_t retain_seconds = 0;
  std::chrono::milliseconds timeout{0};  // 0: none
};

struct JobResult {
  std::string job_id;
  Tensor output;                        // [L, d_out]
  std::vector<Tensor> queries;          // [L_k, d_out]
  std::map<std::string, Tensor> state;  // SPEC section 7 names (if asked)
  std::vector<v1::ShardRange> shards;
  v1::JobStats stats;
};

class LactClient {
 public:
  using ProgressFn = std::function<void(const v1::Progress&)>;

  explicit LactClient(const std::string& address);

  absl::StatusOr<JobResult> Submit(const SubmitOptions& options, const Tensor& context,
                                   const std::vector<Tensor>& queries, const ProgressFn& progress = nullptr,
                                   std::function<void(const std::string&)> on_accepted = nullptr);
  absl::StatusOr<std::vector<Tensor>> Query(const std::string& job_id, const std::vector<Tensor>& queries,
                                            WireType dtype = WireType::kF32,
                                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  absl::StatusOr<v1::JobInfo> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::JobInfo>> ListJobs();
  absl::StatusOr<v1::JobInfo> CancelJob(const std::string& job_id);
  absl::Status DeleteJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::ModelInfo>> ListModels();
  // The config of a model the cluster serves (NOT_FOUND naming the others).
  absl::StatusOr<ModelConfig> FindModel(const std::string& model);

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace lact

#endif  // LACT_CLIENT_LACT_CLIENT_H_
