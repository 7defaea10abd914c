// Positional file I/O that finishes what it starts, and one contiguous byte
// range of a file written in order, a piece at a time (a shard's output
// rows as they are made or received). A range of 8 MiB or more sends its
// 4 KiB-aligned middle straight to the disk (O_DIRECT, where the file
// system takes it), gathered into 8 MiB aligned writes; the partial blocks
// at its two ends, which neighbouring ranges or a header may share, go
// through the page cache, so ranges of one file may be written at once
// from several threads or processes. A job's output is written once and
// read elsewhere, and filling fresh page-cache pages costs more than the
// disk write on the machines measured (docs/performance.md).
#ifndef LACT_COMMON_RANGE_WRITER_H_
#define LACT_COMMON_RANGE_WRITER_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace lact {

// Every byte or DATA_LOSS naming `path`, the offset and the error.
absl::Status FullPread(int fd, char* dst, size_t bytes, uint64_t offset, const std::string& path);
absl::Status FullPwrite(int fd, const char* src, size_t bytes, uint64_t offset,
                        const std::string& path);

// Bytes [begin, end) of a file, appended in order. `fd` (buffered) and
// `direct_fd` (the same file opened with O_DIRECT, or -1 for none) are
// borrowed and must outlive the writer. One thread at a time.
class RangeWriter {
 public:
  static constexpr uint64_t kDirectBlock = 4096;
  static constexpr uint64_t kDirectMinBytes = uint64_t{8} << 20;

  RangeWriter(std::string path, int fd, int direct_fd, uint64_t begin, uint64_t end);
  RangeWriter(const RangeWriter&) = delete;
  RangeWriter& operator=(const RangeWriter&) = delete;

  // The next `size` bytes; OUT_OF_RANGE past the range's end.
  absl::Status Append(const char* bytes, uint64_t size);
  // Bytes of the range not appended yet.
  uint64_t left() const { return end_ - next_; }

 private:
  static constexpr uint64_t kBounceBytes = uint64_t{8} << 20;
  absl::Status FlushBounce();

  const std::string path_;
  const int fd_;
  int direct_fd_ = -1;
  std::unique_ptr<char, decltype(&std::free)> bounce_{nullptr, &std::free};
  uint64_t next_ = 0, end_ = 0;                 // file offsets: the next byte, the range's end
  uint64_t direct_begin_ = 0, direct_end_ = 0;  // the aligned middle
  uint64_t bounce_used_ = 0;  // the bounce buffer holds [next_ - bounce_used_, next_)
};

}  // namespace lact

#endif  // LACT_COMMON_RANGE_WRITER_H_
