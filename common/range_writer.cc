#include "common/range_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lact {

absl::Status FullPread(int fd, char* dst, size_t bytes, uint64_t offset, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = pread(fd, dst, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(
          absl::StrCat("reading '", path, "' at byte ", offset, ": ",
                       n == 0 ? "unexpected end of file" : std::strerror(errno)));
    }
    dst += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status FullPwrite(int fd, const char* src, size_t bytes, uint64_t offset,
                        const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, src, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(
          absl::StrCat("writing '", path, "' at byte ", offset, ": ", std::strerror(errno)));
    }
    src += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

RangeWriter::RangeWriter(std::string path, int fd, int direct_fd, uint64_t begin, uint64_t end)
    : path_(std::move(path)), fd_(fd), next_(begin), end_(end) {
  const uint64_t first = (begin + kDirectBlock - 1) / kDirectBlock * kDirectBlock;
  const uint64_t last = end / kDirectBlock * kDirectBlock;
  direct_begin_ = direct_end_ = end;
  void* raw = nullptr;
  if (direct_fd >= 0 && end - begin >= kDirectMinBytes && first < last &&
      posix_memalign(&raw, kDirectBlock, kBounceBytes) == 0) {
    direct_fd_ = direct_fd;
    bounce_.reset(static_cast<char*>(raw));
    direct_begin_ = first;
    direct_end_ = last;
  }
}

absl::Status RangeWriter::Append(const char* bytes, uint64_t size) {
  if (size > end_ - next_) {
    return absl::OutOfRangeError(absl::StrCat("'", path_, "': ", size, " bytes more than the ",
                                              end_ - next_, " left of the range"));
  }
  while (size > 0) {
    uint64_t take;
    if (next_ < direct_begin_ || next_ >= direct_end_) {  // a partial block: the page cache
      take = std::min(size, (next_ < direct_begin_ ? direct_begin_ : end_) - next_);
      LACT_RETURN_IF_ERROR(FullPwrite(fd_, bytes, take, next_, path_));
    } else {
      take = std::min({size, direct_end_ - next_, kBounceBytes - bounce_used_});
      std::memcpy(bounce_.get() + bounce_used_, bytes, take);
      bounce_used_ += take;
    }
    bytes += take;
    size -= take;
    next_ += take;
    if (bounce_used_ == kBounceBytes || (bounce_used_ > 0 && next_ == direct_end_))
      LACT_RETURN_IF_ERROR(FlushBounce());
  }
  return absl::OkStatus();
}

absl::Status RangeWriter::FlushBounce() {
  const uint64_t offset = next_ - bounce_used_;
  for (uint64_t done = 0; done < bounce_used_;) {
    const ssize_t written = pwrite(direct_fd_, bounce_.get() + done, bounce_used_ - done,
                                   static_cast<off_t>(offset + done));
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EINVAL) {  // alignment this file system will not take
      LACT_RETURN_IF_ERROR(
          FullPwrite(fd_, bounce_.get() + done, bounce_used_ - done, offset + done, path_));
      break;
    }
    if (written <= 0) {
      return absl::DataLossError(absl::StrCat("writing '", path_, "' at byte ", offset + done, ": ",
                                              std::strerror(written < 0 ? errno : EIO)));
    }
    done += static_cast<uint64_t>(written);
  }
  bounce_used_ = 0;
  return absl::OkStatus();
}

}  // namespace lact
