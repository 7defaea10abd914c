// The RunShard streams of one running job, one per rank: opens them with
// each rank's ShardSpec, forwards context rows to the ranks that own them
// (float32 chunks of at most 4 MiB, in order; a write blocks while the
// worker is slow, which slows the client instead of growing buffers here),
// and cancels them all at once. Open/Forward/Close are called by one thread;
// Cancel may be called from any thread, before, during or after Open (a
// stream opened after Cancel is cancelled at once).
#ifndef LACT_SERVER_WORKER_STREAMS_H_
#define LACT_SERVER_WORKER_STREAMS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "lact/v1/worker.grpc.pb.h"
#include "server/job_admission.h"

namespace lact::server {

std::shared_ptr<grpc::Channel> WorkerChannel(const std::string& address);

class WorkerStreams {
 public:
  using Stream = grpc::ClientReaderWriter<v1::ShardRequest, v1::ShardResponse>;

  WorkerStreams(std::vector<std::string> addresses, std::vector<std::pair<int64_t, int64_t>> shards)
      : addresses_(std::move(addresses)), shards_(std::move(shards)) {}

  // Opens every stream and sends its ShardSpec (template: rank, begin and
  // tokens are filled in per rank).
  absl::Status Open(const v1::ShardSpec& spec, std::chrono::system_clock::time_point deadline);
  // Context rows [offset, offset + n) (global) as float32 bytes; a chunk
  // within one shard is passed on without a copy.
  absl::Status Forward(int64_t offset, int64_t n, int64_t width, std::string f32_bytes);
  void CloseUploads();
  void Cancel();

  int size() const { return static_cast<int>(addresses_.size()); }
  Stream* stream(int rank) { return streams_[rank].get(); }
  const std::string& address(int rank) const { return addresses_[rank]; }
  int64_t begin(int rank) const { return shards_[rank].first; }
  grpc::Status Finish(int rank) { return streams_[rank]->Finish(); }
  // The rank whose stream broke in Open or Forward, or -1.
  int broken_rank() const { return broken_rank_; }
  bool cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  std::vector<std::string> addresses_;
  std::vector<std::pair<int64_t, int64_t>> shards_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs_;
  std::mutex mu_;  // guards contexts_ and cancelled_ against Cancel()
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  bool cancelled_ = false;
  std::vector<std::unique_ptr<Stream>> streams_;
  int broken_rank_ = -1;
};

}  // namespace lact::server

#endif  // LACT_SERVER_WORKER_STREAMS_H_
