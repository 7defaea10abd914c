#include "worker/data_plane/output_file_stream.h"

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
    : writer_(std::move(writer)), queue_([this](RowSlice& rows) { return Write(rows); }) {}

OutputFileStream::~OutputFileStream() = default;

absl::Status OutputFileStream::Put(RowSlice rows) { return queue_.Put(std::move(rows)); }

absl::Status OutputFileStream::Finish() {
  LACT_RETURN_IF_ERROR(queue_.Await());
  return writer_->Finish();  // the thread is idle: nothing is queued
}

int64_t OutputFileStream::bytes_written() const { return bytes_written_; }

absl::Status OutputFileStream::Write(RowSlice& rows) {
  LACT_RETURN_IF_ERROR(writer_->Append(rows.data(), rows.n));
  bytes_written_ += rows.size() * static_cast<int64_t>(sizeof(float));
  return absl::OkStatus();
}

}  // namespace lact
