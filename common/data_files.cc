#include "common/data_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace lact {
namespace {

// Output writes of at least kDirectMinBytes bypass the page cache for their
// kDirectBlock-aligned middle: a job's output is written once and read
// elsewhere, and filling fresh page-cache pages costs more than the disk
// write on the machines measured (README, the data path).
constexpr uint64_t kDirectBlock = 4096;
constexpr uint64_t kDirectMinBytes = uint64_t{8} << 20;

// Closes a file descriptor at scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer) == nullptr) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("'", path, "' does not exist"));
    return absl::PermissionDeniedError(absl::StrCat("'", path, "': ", std::strerror(e)));
  }
  return std::string(buffer);
}

bool Inside(const std::string& root, const std::string& path) {
  return path == root || absl::StartsWith(path, root == "/" ? root : root + "/");
}

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

absl::StatusOr<WireType> NpyDType(const std::string& path, const std::string& descr) {
  if (descr == "<f4" || descr == "=f4") return WireType::kF32;
  if (descr == "<f2" || descr == "=f2") return WireType::kF16;
  if (descr == "|V2" || descr == "<V2") return WireType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("npy '", path, "': dtype '", descr,
                   "' is not a token dtype (allowed: <f4, <f2, |V2 = bfloat16)"));
}

absl::StatusOr<TokenFileLayout> OpenNpy(const std::string& path, int fd, uint64_t file_size) {
  std::string prefix(std::min<uint64_t>(file_size, 1 << 16), '\0');
  LACT_RETURN_IF_ERROR(FullPread(fd, prefix.data(), prefix.size(), 0, path));
  LACT_ASSIGN_OR_RETURN(
      NpyLayout npy,
      ParseNpyLayout(path, reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()));
  TokenFileLayout layout;
  layout.path = path;
  LACT_ASSIGN_OR_RETURN(layout.dtype, NpyDType(path, npy.descr));
  if (npy.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy '", path, "': shape ", ShapeString(npy.shape), " is not [tokens, width]"));
  }
  layout.rows = npy.shape[0];
  layout.width = npy.shape[1];
  layout.data_offset = npy.data_offset;
  return layout;
}

absl::StatusOr<TokenFileLayout> OpenSafetensors(const std::string& path,
                                                const std::string& tensor) {
  LACT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  const auto& entries = file.entries();
  auto it = tensor.empty() && entries.size() == 1 ? entries.begin() : entries.find(tensor);
  if (it == entries.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors '", path, "' ",
        tensor.empty() ? "holds several tensors; name one" : "has no tensor '" + tensor + "'",
        " (DataRef.tensor)"));
  }
  const TensorEntry& e = it->second;
  TokenFileLayout layout;
  layout.path = path;
  switch (e.dtype) {
    case DType::kF32:
      layout.dtype = WireType::kF32;
      break;
    case DType::kF16:
      layout.dtype = WireType::kF16;
      break;
    case DType::kBF16:
      layout.dtype = WireType::kBF16;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("safetensors '", path, "' tensor '", it->first,
                                                     "' is ", DTypeName(e.dtype),
                                                     " (allowed: F32, F16, BF16)"));
  }
  if (e.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors '", path, "' tensor '", it->first,
                                                   "' has shape ", ShapeString(e.shape),
                                                   ", not [tokens, width]"));
  }
  layout.rows = e.shape[0];
  layout.width = e.shape[1];
  layout.data_offset = file.data_start() + e.offset;
  return layout;
}

}  // namespace

absl::StatusOr<std::string> ResolveDataPath(const std::string& root, const std::string& ref,
                                            bool for_output) {
  if (root.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", ref,
                     "' names a file, but this cluster has no data root "
                     "(start it with --data-root DIR to allow files by reference)"));
  }
  absl::string_view uri = ref;
  const bool is_uri = absl::ConsumePrefix(&uri, "file://");
  std::string path(uri);
  if (is_uri) {
    if (!absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", ref, "': only file:///absolute/path URIs are allowed"));
    }
  }
  if (path.empty()) return absl::InvalidArgumentError("DataRef.path is empty");
  if (!absl::StartsWith(path, "/")) path = absl::StrCat(root, "/", path);
  LACT_ASSIGN_OR_RETURN(const std::string real_root, RealPath(root));
  std::string resolved;
  if (for_output) {
    const size_t slash = path.find_last_of('/');
    const std::string name = path.substr(slash + 1),
                      folder = slash == 0 ? "/" : path.substr(0, slash);
    if (name.empty() || name == "." || name == "..") {
      return absl::InvalidArgumentError(absl::StrCat("output '", ref, "' does not name a file"));
    }
    absl::StatusOr<std::string> real_folder = RealPath(folder);
    if (!real_folder.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", ref, "': its folder ", real_folder.status().message()));
    }
    resolved = absl::StrCat(*real_folder == "/" ? "" : *real_folder, "/", name);
    struct stat st;
    if (lstat(resolved.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "output '", ref,
          "' exists and is not a regular file (a symlink or folder is never replaced)"));
    }
  } else {
    LACT_ASSIGN_OR_RETURN(resolved, RealPath(path));
  }
  if (!Inside(real_root, resolved)) {
    return absl::PermissionDeniedError(absl::StrCat("'", ref, "' resolves to '", resolved,
                                                    "', outside the data root '", real_root, "'"));
  }
  return resolved;
}

absl::StatusOr<TokenFileLayout> OpenTokenFile(const std::string& path, const std::string& tensor) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char magic[6] = {};
  if (size >= 6) LACT_RETURN_IF_ERROR(FullPread(fd.get(), magic, 6, 0, path));
  TokenFileLayout layout;
  if (std::memcmp(magic, "\x93NUMPY", 6) == 0) {
    LACT_ASSIGN_OR_RETURN(layout, OpenNpy(path, fd.get(), size));
  } else if (absl::EndsWith(path, ".safetensors")) {
    LACT_ASSIGN_OR_RETURN(layout, OpenSafetensors(path, tensor));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is neither an .npy file (bad magic) nor a .safetensors file"));
  }
  if (layout.rows < 1 || layout.width < 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' holds ", layout.rows,
                                                   " tokens of width ", layout.width,
                                                   "; need >= 1 of each"));
  }
  const int64_t elements =
      CheckedNumElements({layout.rows, layout.width}, static_cast<int64_t>(size / 2));
  const uint64_t need =
      layout.data_offset + static_cast<uint64_t>(elements) * WireBytes(layout.dtype);
  if (elements < 0 || size < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is ", size, " bytes, too short for its header's ", layout.rows, " x ",
        layout.width, " tokens of ", WireBytes(layout.dtype), " bytes; truncated?"));
  }
  return layout;
}

absl::Status ReadTokenRows(const TokenFileLayout& file, int64_t begin, int64_t n, float* dst) {
  if (begin < 0 || n < 0 || begin + n > file.rows) {
    return absl::OutOfRangeError(absl::StrCat("rows [", begin, ", ", begin + n, ") of '", file.path,
                                              "', which has ", file.rows));
  }
  Fd fd(open(file.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open '", file.path, "': ", std::strerror(errno)));
  const int64_t elem = WireBytes(file.dtype), row_bytes = elem * file.width;
  constexpr int64_t kBlockBytes = int64_t{8} << 20;
  const int64_t rows_per_block = std::max<int64_t>(1, kBlockBytes / row_bytes);
  std::string buffer;
  for (int64_t r = 0; r < n; r += rows_per_block) {
    const int64_t rows = std::min(rows_per_block, n - r);
    const uint64_t offset = file.data_offset + static_cast<uint64_t>((begin + r) * row_bytes);
    float* out = dst + r * file.width;
    if (file.dtype == WireType::kF32) {
      LACT_RETURN_IF_ERROR(
          FullPread(fd.get(), reinterpret_cast<char*>(out), rows * row_bytes, offset, file.path));
      LACT_RETURN_IF_ERROR(CheckFinite(out, rows * file.width, file.width, begin + r));
    } else {
      buffer.resize(rows * row_bytes);
      LACT_RETURN_IF_ERROR(FullPread(fd.get(), buffer.data(), buffer.size(), offset, file.path));
      int64_t decoded = 0;
      LACT_RETURN_IF_ERROR(DecodeTokensInto(buffer, file.dtype, file.width, begin + r, out,
                                            rows * file.width, &decoded));
    }
  }
  return absl::OkStatus();
}

absl::Status CreateTokenFile(const std::string& path, int64_t rows, int64_t width, WireType dtype) {
  // Not O_TRUNC: a file of the same size (a job re-run) is overwritten in
  // place, its pages reused; ftruncate sets the size either way.
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  const char* descr = dtype == WireType::kF32 ? "<f4" : dtype == WireType::kF16 ? "<f2" : "|V2";
  const std::string header = NpyHeaderBytes({rows, width}, descr);
  LACT_RETURN_IF_ERROR(FullPwrite(fd.get(), header.data(), header.size(), 0, path));
  const off_t size = static_cast<off_t>(header.size() + rows * width * WireBytes(dtype));
  if (ftruncate(fd.get(), size) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot size '", path, "' to ", rows, " x ",
                                                     width, " tokens: ", std::strerror(errno)));
  }
  // Its blocks are reserved now: a full disk fails here, before any worker
  // computes, and the workers' writes need not allocate (several times
  // faster than filling a sparse file on ext4).
  if (const int err = posix_fallocate(fd.get(), 0, size);
      err != 0 && err != EOPNOTSUPP && err != EINVAL) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", size, " bytes for '", path, "': ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status CreateOutputFile(const std::string& path, int64_t rows, int64_t width) {
  return CreateTokenFile(path, rows, width, WireType::kF32);
}

absl::StatusOr<std::unique_ptr<OutputRowsWriter>> OutputRowsWriter::Open(const std::string& path,
                                                                         int64_t rows,
                                                                         int64_t width,
                                                                         int64_t begin, int64_t n) {
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open output '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<OutputRowsWriter> writer(new OutputRowsWriter(path, fd));
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat("fstat '", path, "' failed"));
  std::string prefix(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), 1 << 16), '\0');
  LACT_RETURN_IF_ERROR(FullPread(fd, prefix.data(), prefix.size(), 0, path));
  LACT_ASSIGN_OR_RETURN(
      NpyLayout npy,
      ParseNpyLayout(path, reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()));
  if (npy.descr != "<f4" || npy.shape != std::vector<int64_t>{rows, width} || begin < 0 || n < 0 ||
      begin + n > rows) {
    return absl::FailedPreconditionError(
        absl::StrCat("output '", path, "' is no longer a float32 [", rows, ", ", width,
                     "] .npy (changed while the job ran?)"));
  }
  const uint64_t row_bytes = static_cast<uint64_t>(width) * sizeof(float);
  writer->next_ = npy.data_offset + static_cast<uint64_t>(begin) * row_bytes;
  writer->end_ = writer->next_ + static_cast<uint64_t>(n) * row_bytes;
  writer->row_bytes_ = row_bytes;
  // The aligned middle of a large range goes straight to the disk.
  const uint64_t first = (writer->next_ + kDirectBlock - 1) / kDirectBlock * kDirectBlock;
  const uint64_t last = writer->end_ / kDirectBlock * kDirectBlock;
  writer->direct_begin_ = writer->direct_end_ = writer->end_;
  if (writer->end_ - writer->next_ >= kDirectMinBytes && first < last) {
    void* raw = nullptr;
    const int direct = open(path.c_str(), O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    if (direct >= 0 && posix_memalign(&raw, kDirectBlock, kBounceBytes) == 0) {
      writer->direct_fd_ = direct;
      writer->bounce_.reset(static_cast<char*>(raw));
      writer->direct_begin_ = first;
      writer->direct_end_ = last;
    } else if (direct >= 0) {
      close(direct);
    }
  }
  return writer;
}

OutputRowsWriter::~OutputRowsWriter() {
  if (fd_ >= 0) close(fd_);
  if (direct_fd_ >= 0) close(direct_fd_);
}

absl::Status OutputRowsWriter::Append(const float* src, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(src);
  uint64_t size = static_cast<uint64_t>(n) * row_bytes_;
  if (n < 0 || size > end_ - next_) {
    return absl::OutOfRangeError(
        absl::StrCat("output '", path_, "': ", n, " rows more than this shard has left"));
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

absl::Status OutputRowsWriter::FlushBounce() {
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

absl::Status OutputRowsWriter::Finish() {
  if (next_ != end_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output '", path_, "': ", (end_ - next_) / row_bytes_, " of the shard's rows not written"));
  }
  return absl::OkStatus();
}

absl::Status WriteTokenRows(const std::string& path, int64_t rows, int64_t width, int64_t begin,
                            const float* src, int64_t n) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<OutputRowsWriter> writer,
                        OutputRowsWriter::Open(path, rows, width, begin, n));
  LACT_RETURN_IF_ERROR(writer->Append(src, n));
  return writer->Finish();
}

absl::StatusOr<TokenFileWriter> TokenFileWriter::Open(const std::string& path, int64_t rows,
                                                      int64_t width, WireType dtype) {
  LACT_ASSIGN_OR_RETURN(TokenFileLayout layout, OpenTokenFile(path, ""));
  if (layout.rows != rows || layout.width != width || layout.dtype != dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' holds ", layout.rows, " x ", layout.width, " tokens of ",
                     WireBytes(layout.dtype), " bytes, not the ", rows, " x ", width, " of ",
                     WireBytes(dtype), " bytes expected (changed since it was created?)"));
  }
  const int fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  return TokenFileWriter(fd, std::move(layout));
}

TokenFileWriter::TokenFileWriter(TokenFileWriter&& other) noexcept
    : fd_(other.fd_), layout_(std::move(other.layout_)) {
  other.fd_ = -1;
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) close(fd_);
}

absl::Status TokenFileWriter::Write(int64_t row, const std::vector<absl::string_view>& pieces) {
  const uint64_t row_bytes = static_cast<uint64_t>(layout_.width) * WireBytes(layout_.dtype);
  uint64_t bytes = 0;
  for (absl::string_view piece : pieces) bytes += piece.size();
  if (row < 0 || bytes % row_bytes != 0 ||
      static_cast<uint64_t>(row) + bytes / row_bytes > static_cast<uint64_t>(layout_.rows)) {
    return absl::OutOfRangeError(absl::StrCat(bytes, " bytes at row ", row, " of '", layout_.path,
                                              "' (", layout_.rows, " rows of ", row_bytes,
                                              " bytes)"));
  }
  uint64_t offset = layout_.data_offset + static_cast<uint64_t>(row) * row_bytes;
  for (absl::string_view piece : pieces) {
    LACT_RETURN_IF_ERROR(FullPwrite(fd_, piece.data(), piece.size(), offset, layout_.path));
    offset += piece.size();
  }
  return absl::OkStatus();
}

}  // namespace lact
