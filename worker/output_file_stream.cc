#include "worker/output_file_stream.h"

#include <utility>

#include "common/status_macros.h"

namespace lact {

absl::StatusOr<std::unique_ptr<OutputFileStream>> OutputFileStream::Open(const DataPath& path,
                                                                         int64_t rows,
                                                                         int64_t width,
                                                                         int64_t begin, int64_t n) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<OutputRowsWriter> writer,
                        OutputRowsWriter::Open(path, rows, width, begin, n));
  return std::unique_ptr<OutputFileStream>(new OutputFileStream(std::move(writer)));
}

OutputFileStream::OutputFileStream(std::unique_ptr<OutputRowsWriter> writer)
    : writer_(std::move(writer)), thread_([this] { Run(); }) {}

OutputFileStream::~OutputFileStream() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status OutputFileStream::Put(Tensor rows) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  queued_.push_back(std::move(rows));
  return absl::OkStatus();
}

absl::Status OutputFileStream::Finish() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](OutputFileStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return !s->failure_.ok() || (s->queued_.empty() && !s->writing_);
      },
      this));
  if (!failure_.ok()) return failure_;
  failure_ = writer_->Finish();  // the thread is idle: nothing is queued
  return failure_;
}

int64_t OutputFileStream::bytes_written() const {
  absl::MutexLock lock(&mu_);
  return bytes_written_;
}

void OutputFileStream::Run() {
  while (true) {
    Tensor rows;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](OutputFileStream* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stop_ || !s->queued_.empty(); },
          this));
      if (stop_) return;
      rows = std::move(queued_.front());
      queued_.pop_front();
      writing_ = true;
    }
    const absl::Status written = writer_->Append(rows.ptr(), rows.rank() == 2 ? rows.dim(0) : 0);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (written.ok()) {
      bytes_written_ += rows.size() * static_cast<int64_t>(sizeof(float));
    } else if (failure_.ok()) {
      failure_ = written;
      queued_.clear();
    }
  }
}

}  // namespace lact
