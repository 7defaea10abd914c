// The RunShard streams of one running job, one per rank: opens them with
// each rank's ShardSpec and cancels them all at once. Open is called by one
// thread; each rank's stream is then read (and finished) by one thread;
// Cancel may be called from any thread, before, during or after Open (a
// stream opened after Cancel is cancelled at once).
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

class WorkerStreams {
 public:
  using Stream = grpc::ClientReaderWriter<v1::ShardRequest, v1::ShardResponse>;

  WorkerStreams(ClusterLink link, std::vector<std::string> addresses)
      : link_(std::move(link)), addresses_(std::move(addresses)) {}

  // Opens every stream and sends specs[r] to rank r.
  absl::Status Open(const std::vector<v1::ShardSpec>& specs,
                    std::chrono::system_clock::time_point deadline);
  void Cancel();

  int size() const { return static_cast<int>(addresses_.size()); }
  Stream* stream(int rank) { return streams_[rank].get(); }
  const std::string& address(int rank) const { return addresses_[rank]; }
  // Ends rank's stream; `*from_worker` says whether the status came from
  // the worker's handler (false: the transport broke, the worker is gone).
  grpc::Status Finish(int rank, bool* from_worker);
  // The rank whose stream broke in Open, or -1.
  int broken_rank() const { return broken_rank_; }

 private:
  const ClusterLink link_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Stream>> streams_;
  int broken_rank_ = -1;
};

}  // namespace lact::server

#endif  // LACT_SERVER_WORKER_STREAMS_H_
