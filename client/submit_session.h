// One Submit of LactClient's, across its calls: a call lost to the
// coordinator going away (a restart) is made again, and the job's result,
// the transfers of the attempt that runs and the progress carry on from
// one call to the next. Each call's stream is read here: the job's id, each
// attempt's JobAccepted (its transfers started, unless it is the attempt
// whose transfers run: a call made again announces it again), progress
// (the client's own upload count first, then the coordinator's), JobDone.
// One thread reads; the transfers report their upload from theirs.
#ifndef LACT_CLIENT_SUBMIT_SESSION_H_
#define LACT_CLIENT_SUBMIT_SESSION_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/job_io.h"
#include "client/job_transfers.h"
#include "lact/v1/coordinator.grpc.pb.h"

namespace lact {

// Passes the client's upload progress on, at most every 500 ms and at its
// end, until the coordinator's own progress takes over; and the
// coordinator's. One at a time, from the Transfer streams' threads and
// Submit's.
class ProgressRelay {
 public:
  explicit ProgressRelay(const std::function<void(const v1::Progress&)>& progress)
      : progress_(progress) {}

  void StartUpload(int64_t total) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    total_ = total;
    start_ = std::chrono::steady_clock::now();
    uploading_ = progress_ != nullptr;
  }
  void ContextSent(int64_t sent) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const auto now = std::chrono::steady_clock::now();
    if (!uploading_ || (sent < total_ && now - last_report_ < std::chrono::milliseconds(500))) {
      return;
    }
    last_report_ = now;
    v1::Progress p;
    p.set_stage(v1::Progress::UPLOAD);
    p.set_tokens_done(sent);
    p.set_tokens_total(total_);
    p.set_elapsed_seconds(std::chrono::duration<double>(now - start_).count());
    progress_(p);
  }
  void FromServer(const v1::Progress& p) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    uploading_ = false;
    if (progress_) progress_(p);
  }

 private:
  const std::function<void(const v1::Progress&)>& progress_;
  absl::Mutex mu_;
  bool uploading_ ABSL_GUARDED_BY(mu_) = false;
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point start_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_report_ ABSL_GUARDED_BY(mu_);
};

// What a Submit is given.
struct SubmitInput {
  const OutputTarget& output;
  bool detach;  // return once the job's id is known (SubmitOptions.detach)
  const ContextInput& context;
  const std::vector<Tensor>& queries;
  const std::function<void(const v1::Progress&)>& progress;
  std::function<void(const std::string&)> on_accepted;
};

class SubmitSession {
 public:
  // `input`'s references must outlive the session.
  SubmitSession(std::shared_ptr<grpc::ChannelCredentials> credentials, SubmitInput input,
                std::chrono::system_clock::time_point deadline)
      : credentials_(std::move(credentials)),
        in_(std::move(input)),
        deadline_(deadline),
        relay_(in_.progress) {}

  // How one call ended.
  struct CallEnd {
    grpc::Status status;
    bool answered = false;    // a response came
    bool keeps_jobs = false;  // the coordinator keeps its jobs across restarts (kKeepsJobsKey)
    bool detached = false;    // the job's id came and SubmitOptions.detach ended the call
  };
  CallEnd Read(grpc::ClientReader<v1::SubmitResponse>* stream, grpc::ClientContext* ctx);
  // A Progress COORDINATOR_AWAY: the call was lost, the job runs on.
  void CoordinatorAway();

  const std::string& job_id() const { return result_.job_id; }
  // The attempt's transfers that run, or null.
  JobTransfers* transfers() { return transfers_.get(); }
  // The result, once the transfers have ended (joined).
  JobResult TakeResult() { return std::move(result_); }

 private:
  void StartAttempt(const v1::JobAccepted& accepted);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const SubmitInput in_;
  const std::chrono::system_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  ProgressRelay relay_;
  JobResult result_;
  std::unique_ptr<JobTransfers> transfers_;
  std::string ticket_;  // of the attempt whose transfers run
};

}  // namespace lact

#endif  // LACT_CLIENT_SUBMIT_SESSION_H_
