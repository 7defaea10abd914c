// The coordinator's spool (--spool-dir): where an in-band job's context is
// kept while the job runs, so the job can run again on other workers if
// one dies. The coordinator creates each job's file (an .npy of the whole
// context in the job's wire dtype, its blocks reserved) and deletes it
// when the job ends; the workers, which share the folder, write their own
// rows into it as they receive them (the bytes never pass through the
// coordinator). A re-run reads the context from it by reference.
//
// Bounded: the files together hold at most `max_bytes`; a job that does
// not fit (or whose file the disk cannot hold) runs unspooled, and so
// cannot run again, rather than being refused. Thread-safe.
#ifndef LACT_SERVER_JOB_SPOOL_H_
#define LACT_SERVER_JOB_SPOOL_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/token_codec.h"

namespace lact::server {

class JobSpool {
 public:
  // `dir` empty: nothing is spooled.
  JobSpool(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

  // Makes `dir` (0700) and deletes spool files a previous coordinator left
  // behind, but those of the jobs in `keep` (taken back: their files are
  // counted against the bytes again).
  absl::Status Open(const std::set<std::string>& keep = {});

  bool enabled() const { return !dir_.empty(); }
  // The path of `job_id`'s new spool file for `tokens` x `width` tokens of
  // `dtype`; RESOURCE_EXHAUSTED naming --spool-bytes when it does not fit,
  // or the disk's error; FAILED_PRECONDITION when there is no spool.
  absl::StatusOr<std::string> Create(const std::string& job_id, int64_t tokens, int64_t width,
                                     WireType dtype);
  // Deletes the job's file and frees its bytes (no-op if it has none).
  void Remove(const std::string& job_id);
  int64_t used_bytes() const;

 private:
  static std::string FileName(const std::string& job_id);
  std::string PathOf(const std::string& job_id) const;

  const std::string dir_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> bytes_ ABSL_GUARDED_BY(mu_);  // by job
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_SPOOL_H_
