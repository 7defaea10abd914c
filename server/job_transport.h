// What a job's run (job_run.h) needs of the world beyond the coordinator's
// own records: the streams to its workers, and the client's call. The
// gRPC streams (worker_streams.h) and the Submit call (submit_flow.cc) are
// one implementation; unit tests give their own, so the run's re-run,
// blame and stall decisions are tested without processes.
#ifndef LACT_SERVER_JOB_TRANSPORT_H_
#define LACT_SERVER_JOB_TRANSPORT_H_

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lact/v1/coordinator.pb.h"
#include "lact/v1/worker.pb.h"
#include "server/job_machine.h"

namespace lact::server {

// One attempt's RunShard streams, one per rank. Open is called by one
// thread; each rank's stream is then read (and finished) by one thread;
// Cancel may be called from any thread, before, during or after Open (a
// stream opened after Cancel is cancelled at once).
class AttemptStreams {
 public:
  virtual ~AttemptStreams() = default;
  // Opens every rank's stream and sends specs[r] to rank r.
  virtual absl::Status Open(const std::vector<v1::ShardSpec>& specs,
                            std::chrono::system_clock::time_point deadline) = 0;
  // The rank's next message; false once its stream has ended.
  virtual bool Read(int rank, v1::RunShardResponse* response) = 0;
  // How the rank's stream ended, once Read returned false.
  virtual RankEnd Finish(int rank) = 0;
  virtual void Cancel() = 0;
  virtual int size() const = 0;
  virtual const std::string& address(int rank) const = 0;
  // The rank whose stream broke in Open, or -1.
  virtual int broken_rank() const = 0;
};

// The workers, as a job's run reaches them.
class JobTransport {
 public:
  virtual ~JobTransport() = default;
  // Streams to `addresses`, one rank each, not yet open.
  virtual std::shared_ptr<AttemptStreams> Streams(std::vector<std::string> addresses) = 0;
  // Streams that follow again the shards of attempt `attempt` of `job_id`
  // that `addresses` hold, one rank each (a job taken back after a
  // restart); Open ignores its specs.
  virtual std::shared_ptr<AttemptStreams> Follow(std::vector<std::string> addresses,
                                                 const std::string& job_id, int attempt) = 0;
  // Has each worker drop what it retained of the job, best effort.
  virtual void Forget(const std::string& job_id, const std::string& fetch_ticket,
                      const std::vector<std::string>& workers) = 0;
};

// The client's Submit call, as a job's run sees it. Write is called from
// one thread at a time.
class JobCall {
 public:
  virtual ~JobCall() = default;
  // False once the call has ended.
  virtual bool Write(const v1::SubmitResponse& response) = 0;
  virtual bool ended() const = 0;
  // Whether the call ends within `wait` (true at once if it has).
  virtual bool EndsWithin(absl::Duration wait) const = 0;
  virtual std::chrono::system_clock::time_point deadline() const = 0;
  // The deadline, at most a week from now: what the calls made on this
  // call's behalf inherit (a call without a deadline has an infinite one).
  std::chrono::system_clock::time_point capped_deadline() const {
    return std::min(deadline(), std::chrono::system_clock::now() + std::chrono::hours(24 * 7));
  }
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_TRANSPORT_H_
