// A shard's output rows on their way into the job's output file
// (ShardSpec.output_ref), written on a thread of their own while the last
// block computes the next tile: Put() queues a tile's rows (it never
// blocks: the queue holds at most the shard's output, which the worker
// would otherwise hold whole) and the thread appends them in order through
// an OutputRowsWriter. The first failed write fails the stream: Put then
// returns it, so the run stops, and Finish says it. Put and Finish come
// from one thread (the run's); the destructor stops the writer after the
// write in progress, leaving the rest unwritten.
#ifndef LACT_WORKER_DATA_PLANE_OUTPUT_FILE_STREAM_H_
#define LACT_WORKER_DATA_PLANE_OUTPUT_FILE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_files.h"
#include "common/tensor.h"
#include "worker/data_plane/write_queue.h"

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

  // The next rows of the shard; the stream's failure, if any.
  absl::Status Put(RowSlice rows);
  // Waits until every row put is written; OK once all n rows are.
  absl::Status Finish();
  // Bytes written so far.
  int64_t bytes_written() const;

 private:
  explicit OutputFileStream(std::unique_ptr<OutputRowsWriter> writer);
  absl::Status Write(RowSlice& rows);

  std::unique_ptr<OutputRowsWriter> writer_;  // the queue's thread's, then Finish's
  std::atomic<int64_t> bytes_written_{0};
  WriteQueue<RowSlice> queue_;  // last: its thread writes with the rest
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_OUTPUT_FILE_STREAM_H_
