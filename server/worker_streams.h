// How the coordinator reaches its workers over gRPC: the channels, Forget,
// and the RunShard streams of one attempt of a job (job_transport.h),
// opened with each rank's ShardSpec and cancelled all at once.
#ifndef LACT_SERVER_WORKER_STREAMS_H_
#define LACT_SERVER_WORKER_STREAMS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lact/v1/worker.grpc.pb.h"
#include "proto/metadata_keys.h"
#include "server/job_transport.h"

namespace lact::server {

// How the coordinator reaches its workers: the channel credentials
// (plaintext, or TLS with the coordinator's client certificate) and the
// cluster secret it presents (none when empty).
struct ClusterLink {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::string secret;
};

std::shared_ptr<grpc::Channel> WorkerChannel(const ClusterLink& link, const std::string& address);

// Has each worker drop what it retained of a job (Worker.Forget), best
// effort: a worker that does not answer within 5 s drops it at its TTL.
void ForgetOnWorkers(const ClusterLink& link, const std::string& job_id,
                     const std::string& fetch_ticket, const std::vector<std::string>& workers);

// The network's AttemptStreams: RunShard calls to the workers, or
// AttachShard calls that follow an attempt's held shards again.
class WorkerStreams final : public AttemptStreams {
 public:
  using Stream = grpc::ClientReader<v1::RunShardResponse>;

  WorkerStreams(ClusterLink link, std::vector<std::string> addresses)
      : link_(std::move(link)), addresses_(std::move(addresses)) {}
  // Streams that follow attempt `attempt` of `job_id` (AttachShard).
  WorkerStreams(ClusterLink link, std::vector<std::string> addresses, std::string job_id,
                int attempt)
      : link_(std::move(link)),
        addresses_(std::move(addresses)),
        follow_job_(std::move(job_id)),
        follow_attempt_(attempt) {}

  absl::Status Open(const std::vector<v1::ShardSpec>& specs,
                    std::chrono::system_clock::time_point deadline) override;
  bool Read(int rank, v1::RunShardResponse* response) override {
    return streams_[rank]->Read(response);
  }
  // from_worker says whether the status came from the worker's handler
  // (false: the transport broke, the worker is gone).
  RankEnd Finish(int rank) override;
  void Cancel() override;
  int size() const override { return static_cast<int>(addresses_.size()); }
  const std::string& address(int rank) const override { return addresses_[rank]; }
  int broken_rank() const override { return -1; }

 private:
  const ClusterLink link_;
  std::vector<std::string> addresses_;
  const std::string follow_job_;  // empty: RunShard
  const int follow_attempt_ = 0;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// The network's JobTransport.
class GrpcJobTransport final : public JobTransport {
 public:
  explicit GrpcJobTransport(ClusterLink link) : link_(std::move(link)) {}
  std::shared_ptr<AttemptStreams> Streams(std::vector<std::string> addresses) override {
    return std::make_shared<WorkerStreams>(link_, std::move(addresses));
  }
  std::shared_ptr<AttemptStreams> Follow(std::vector<std::string> addresses,
                                         const std::string& job_id, int attempt) override {
    return std::make_shared<WorkerStreams>(link_, std::move(addresses), job_id, attempt);
  }
  void Forget(const std::string& job_id, const std::string& fetch_ticket,
              const std::vector<std::string>& workers) override {
    ForgetOnWorkers(link_, job_id, fetch_ticket, workers);
  }

 private:
  const ClusterLink link_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_WORKER_STREAMS_H_
