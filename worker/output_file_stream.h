// A shard's output rows on their way into the job's output file
// (ShardSpec.output_ref), written on a thread of their own while the last
// block computes the next tile: Put() queues a tile's rows (it never
// blocks: the queue holds at most the shard's output, which the worker
// would otherwise hold whole) and the thread appends them in order through
// an OutputRowsWriter. The first failed write fails the stream: Put then
// returns it, so the run stops, and Finish says it. Put and Finish come
// from one thread (the run's); the destructor stops the writer after the
// write in progress, leaving the rest unwritten.
#ifndef LACT_WORKER_OUTPUT_FILE_STREAM_H_
#define LACT_WORKER_OUTPUT_FILE_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/data_files.h"
#include "common/tensor.h"

namespace lact {

class OutputFileStream {
 public:
  // Rows [begin, begin + n) of the [rows, width] float32 output at `path`.
  static absl::StatusOr<std::unique_ptr<OutputFileStream>> Open(const DataPath& path, int64_t rows,
                                                                int64_t width, int64_t begin,
                                                                int64_t n);
  ~OutputFileStream();
  OutputFileStream(const OutputFileStream&) = delete;
  OutputFileStream& operator=(const OutputFileStream&) = delete;

  // The next rows of the shard ([k, width]); the stream's failure, if any.
  absl::Status Put(Tensor rows);
  // Waits until every row put is written; OK once all n rows are.
  absl::Status Finish();
  // Bytes written so far.
  int64_t bytes_written() const;

 private:
  explicit OutputFileStream(std::unique_ptr<OutputRowsWriter> writer);
  void Run();

  std::unique_ptr<OutputRowsWriter> writer_;  // the thread's
  mutable absl::Mutex mu_;
  std::deque<Tensor> queued_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace lact

#endif  // LACT_WORKER_OUTPUT_FILE_STREAM_H_
