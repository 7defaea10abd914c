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
#include "common/error_text.h"
#include "common/mapped_file.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace lact {
namespace {

// A token file's safetensors header: one tensor, or a few.
constexpr uint64_t kMaxTokenHeaderBytes = uint64_t{1} << 20;

absl::StatusOr<WireType> NpyDType(const std::string& path, const std::string& descr) {
  if (descr == "<f4" || descr == "=f4") return WireType::kF32;
  if (descr == "<f2" || descr == "=f2") return WireType::kF16;
  if (descr == "|V2" || descr == "<V2") return WireType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("npy '", path, "': dtype '", ErrorQuote(descr),
                   "' is not a token dtype (allowed: <f4, <f2, |V2 = bfloat16)"));
}

absl::StatusOr<TokenFileLayout> OpenNpy(const DataPath& data_path, int fd, uint64_t file_size) {
  const std::string& path = data_path.shown();
  std::string prefix(std::min<uint64_t>(file_size, 1 << 16), '\0');
  LACT_RETURN_IF_ERROR(FullPread(fd, prefix.data(), prefix.size(), 0, path));
  LACT_ASSIGN_OR_RETURN(
      NpyLayout npy,
      ParseNpyLayout(path, reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()));
  TokenFileLayout layout;
  layout.path = data_path;
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

absl::StatusOr<TokenFileLayout> OpenSafetensors(const DataPath& data_path, FileHandle fd,
                                                const std::string& tensor) {
  const std::string& path = data_path.shown();
  LACT_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::FromDescriptor(fd.get(), path));
  LACT_ASSIGN_OR_RETURN(SafetensorsFile file,
                        SafetensorsFile::FromMapped(std::move(mapped), kMaxTokenHeaderBytes));
  const auto& entries = file.entries();
  auto it = tensor.empty() && entries.size() == 1 ? entries.begin() : entries.find(tensor);
  if (it == entries.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors '", path, "' ",
                     tensor.empty() ? "holds several tensors; name one"
                                    : "has no tensor '" + ErrorQuote(tensor) + "'",
                     " (DataRef.tensor)"));
  }
  const TensorEntry& e = it->second;
  TokenFileLayout layout;
  layout.path = data_path;
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
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors '", path, "' tensor '", ErrorQuote(it->first), "' is ",
                       DTypeName(e.dtype), " (allowed: F32, F16, BF16)"));
  }
  if (e.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors '", path, "' tensor '",
                                                   ErrorQuote(it->first), "' has shape ",
                                                   ShapeString(e.shape), ", not [tokens, width]"));
  }
  layout.rows = e.shape[0];
  layout.width = e.shape[1];
  layout.data_offset = file.data_start() + e.offset;
  return layout;
}

// Creates (or, if `replace`, reuses) `data_path` as a [rows, width] .npy
// of `dtype`. Not O_TRUNC: a file of the same size (a job re-run) is
// overwritten in place, its pages reused; ftruncate sets the size either way.
absl::StatusOr<ReadyFile> CreateOutputFileOf(const DataPath& data_path, int64_t rows, int64_t width,
                                             WireType dtype, bool replace, const FileId* context) {
  ReadyFile ready;
  LACT_ASSIGN_OR_RETURN(FileHandle fd,
                        CreateDataFile(data_path, replace, &ready.created, &ready.id));
  const std::string& path = data_path.shown();
  if (context != nullptr && ready.id == *context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output '", path, "' is the context file itself (the same file by another name)"));
  }
  const char* descr = dtype == WireType::kF32 ? "<f4" : dtype == WireType::kF16 ? "<f2" : "|V2";
  const std::string header = NpyHeaderBytes({rows, width}, descr);
  absl::Status status = FullPwrite(fd.get(), header.data(), header.size(), 0, path);
  const off_t size = static_cast<off_t>(header.size() + rows * width * WireBytes(dtype));
  if (status.ok() && ftruncate(fd.get(), size) != 0) {
    status = absl::ResourceExhaustedError(absl::StrCat("cannot size '", path, "' to ", rows, " x ",
                                                       width, " tokens: ", std::strerror(errno)));
  }
  // Its blocks are reserved now: a full disk fails here, before any worker
  // computes, and the workers' writes need not allocate (several times
  // faster than filling a sparse file on ext4).
  if (const int err = status.ok() ? posix_fallocate(fd.get(), 0, size) : 0;
      err != 0 && err != EOPNOTSUPP && err != EINVAL) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", size, " bytes for '", path, "': ", std::strerror(err)));
  }
  if (!status.ok() && ready.created) (void)RemoveDataFile(data_path, ready.id);
  if (!status.ok()) return status;
  return ready;
}

}  // namespace

absl::StatusOr<TokenFileLayout> OpenTokenFile(const DataPath& data_path, const std::string& tensor,
                                              FileId* id) {
  LACT_ASSIGN_OR_RETURN(FileHandle fd, OpenDataFile(data_path, O_RDONLY, id));
  const std::string& path = data_path.shown();
  struct stat st;
  if (fstat(fd.get(), &st) != 0)
    return absl::InternalError(absl::StrCat("fstat '", path, "' failed"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char magic[6] = {};
  if (size >= 6) LACT_RETURN_IF_ERROR(FullPread(fd.get(), magic, 6, 0, path));
  TokenFileLayout layout;
  if (std::memcmp(magic, "\x93NUMPY", 6) == 0) {
    LACT_ASSIGN_OR_RETURN(layout, OpenNpy(data_path, fd.get(), size));
  } else if (absl::EndsWith(path, ".safetensors")) {
    LACT_ASSIGN_OR_RETURN(layout, OpenSafetensors(data_path, std::move(fd), tensor));
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
    return absl::OutOfRangeError(absl::StrCat("rows [", begin, ", ", begin + n, ") of '",
                                              file.path.shown(), "', which has ", file.rows));
  }
  LACT_ASSIGN_OR_RETURN(FileHandle fd, OpenDataFile(file.path, O_RDONLY));
  const std::string& path = file.path.shown();
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
          FullPread(fd.get(), reinterpret_cast<char*>(out), rows * row_bytes, offset, path));
      LACT_RETURN_IF_ERROR(CheckFinite(out, rows * file.width, file.width, begin + r));
    } else {
      buffer.resize(rows * row_bytes);
      LACT_RETURN_IF_ERROR(FullPread(fd.get(), buffer.data(), buffer.size(), offset, path));
      int64_t decoded = 0;
      LACT_RETURN_IF_ERROR(DecodeTokensInto(buffer, file.dtype, file.width, begin + r, out,
                                            rows * file.width, &decoded));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ReadyFile> CreateTokenFile(const DataPath& data_path, int64_t rows, int64_t width,
                                          WireType dtype) {
  return CreateOutputFileOf(data_path, rows, width, dtype, /*replace=*/true, nullptr);
}

absl::StatusOr<ReadyFile> CreateOutputFile(const DataPath& path, int64_t rows, int64_t width,
                                           bool replace, const FileId* context) {
  return CreateOutputFileOf(path, rows, width, WireType::kF32, replace, context);
}

absl::StatusOr<std::unique_ptr<OutputRowsWriter>> OutputRowsWriter::Open(const DataPath& data_path,
                                                                         int64_t rows,
                                                                         int64_t width,
                                                                         int64_t begin, int64_t n) {
  LACT_ASSIGN_OR_RETURN(FileHandle opened, OpenDataFile(data_path, O_RDWR));
  const std::string& path = data_path.shown();
  const int fd = opened.release();
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
  const uint64_t first = npy.data_offset + static_cast<uint64_t>(begin) * row_bytes;
  const uint64_t end = first + static_cast<uint64_t>(n) * row_bytes;
  if (end - first >= RangeWriter::kDirectMinBytes) {
    absl::StatusOr<FileHandle> direct = OpenDataFile(data_path, O_WRONLY | O_DIRECT);
    if (direct.ok()) writer->direct_fd_ = direct->release();
  }
  writer->row_bytes_ = row_bytes;
  writer->range_ = std::make_unique<RangeWriter>(path, fd, writer->direct_fd_, first, end);
  return writer;
}

OutputRowsWriter::~OutputRowsWriter() {
  range_.reset();
  if (fd_ >= 0) close(fd_);
  if (direct_fd_ >= 0) close(direct_fd_);
}

absl::Status OutputRowsWriter::Append(const float* src, int64_t n) {
  if (n < 0) return absl::OutOfRangeError(absl::StrCat("output '", path_, "': ", n, " rows"));
  return range_->Append(reinterpret_cast<const char*>(src), static_cast<uint64_t>(n) * row_bytes_);
}

absl::Status OutputRowsWriter::Finish() {
  if (range_->left() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output '", path_, "': ", range_->left() / row_bytes_, " of the shard's rows not written"));
  }
  return absl::OkStatus();
}

absl::Status WriteTokenRows(const DataPath& path, int64_t rows, int64_t width, int64_t begin,
                            const float* src, int64_t n) {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<OutputRowsWriter> writer,
                        OutputRowsWriter::Open(path, rows, width, begin, n));
  LACT_RETURN_IF_ERROR(writer->Append(src, n));
  return writer->Finish();
}

absl::StatusOr<TokenFileWriter> TokenFileWriter::Open(const DataPath& data_path, int64_t rows,
                                                      int64_t width, WireType dtype) {
  LACT_ASSIGN_OR_RETURN(TokenFileLayout layout, OpenTokenFile(data_path, ""));
  const std::string& path = data_path.shown();
  if (layout.rows != rows || layout.width != width || layout.dtype != dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' holds ", layout.rows, " x ", layout.width, " tokens of ",
                     WireBytes(layout.dtype), " bytes, not the ", rows, " x ", width, " of ",
                     WireBytes(dtype), " bytes expected (changed since it was created?)"));
  }
  LACT_ASSIGN_OR_RETURN(FileHandle fd, OpenDataFile(data_path, O_WRONLY));
  return TokenFileWriter(fd.release(), std::move(layout));
}

TokenFileWriter::TokenFileWriter(TokenFileWriter&& other) noexcept
    : fd_(other.fd_),
      direct_fd_(other.direct_fd_),
      layout_(std::move(other.layout_)),
      in_order_(std::move(other.in_order_)),
      next_row_(other.next_row_) {
  other.fd_ = other.direct_fd_ = -1;
}

TokenFileWriter::~TokenFileWriter() {
  in_order_.reset();
  if (fd_ >= 0) close(fd_);
  if (direct_fd_ >= 0) close(direct_fd_);
}

void TokenFileWriter::ExpectInOrder(int64_t begin, int64_t n) {
  const uint64_t row_bytes = static_cast<uint64_t>(layout_.width) * WireBytes(layout_.dtype);
  if (begin < 0 || n < 0 || begin + n > layout_.rows) return;
  const uint64_t first = layout_.data_offset + static_cast<uint64_t>(begin) * row_bytes;
  const uint64_t end = first + static_cast<uint64_t>(n) * row_bytes;
  if (direct_fd_ < 0 && end - first >= RangeWriter::kDirectMinBytes) {
    absl::StatusOr<FileHandle> direct = OpenDataFile(layout_.path, O_WRONLY | O_DIRECT);
    if (direct.ok()) direct_fd_ = direct->release();
  }
  in_order_ = std::make_unique<RangeWriter>(layout_.path.shown(), fd_, direct_fd_, first, end);
  next_row_ = begin;
}

absl::Status TokenFileWriter::Write(int64_t row, const std::vector<absl::string_view>& pieces) {
  const uint64_t row_bytes = static_cast<uint64_t>(layout_.width) * WireBytes(layout_.dtype);
  uint64_t bytes = 0;
  for (absl::string_view piece : pieces) bytes += piece.size();
  if (row < 0 || bytes % row_bytes != 0 ||
      static_cast<uint64_t>(row) + bytes / row_bytes > static_cast<uint64_t>(layout_.rows)) {
    return absl::OutOfRangeError(absl::StrCat(bytes, " bytes at row ", row, " of '",
                                              layout_.path.shown(), "' (", layout_.rows,
                                              " rows of ", row_bytes, " bytes)"));
  }
  if (in_order_ != nullptr && row == next_row_ && bytes <= in_order_->left()) {
    for (absl::string_view piece : pieces)
      LACT_RETURN_IF_ERROR(in_order_->Append(piece.data(), piece.size()));
    next_row_ += static_cast<int64_t>(bytes / row_bytes);
    return absl::OkStatus();
  }
  uint64_t offset = layout_.data_offset + static_cast<uint64_t>(row) * row_bytes;
  for (absl::string_view piece : pieces) {
    LACT_RETURN_IF_ERROR(FullPwrite(fd_, piece.data(), piece.size(), offset, layout_.path.shown()));
    offset += piece.size();
  }
  return absl::OkStatus();
}

}  // namespace lact
