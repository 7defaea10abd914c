// Token files named by reference (JobSpec.context_ref and output_ref): a
// path resolved inside the cluster's data root, a shard's rows read from
// an .npy or .safetensors file, and an output .npy created up front and
// filled by each worker at its rows' offsets.
//
// Every file is a DataPath, opened through its folder at the moment of use
// (data_path.h: no symlink, no "..", regular files only), so a job never
// reads, writes or removes anything outside the root. Errors name the path
// inside the root: those of data_path.h, and INVALID_ARGUMENT for a file
// that is not a 2-D token tensor of a supported dtype or is too short for
// its header. Stateless functions; safe from any thread.
#ifndef LACT_COMMON_DATA_FILES_H_
#define LACT_COMMON_DATA_FILES_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data_path.h"
#include "common/range_writer.h"
#include "common/token_codec.h"

namespace lact {

// Where a [rows, width] token tensor lies in a file.
struct TokenFileLayout {
  DataPath path;
  WireType dtype = WireType::kF32;
  int64_t rows = 0;
  int64_t width = 0;
  uint64_t data_offset = 0;  // byte offset of row 0
};

// Reads the header of an .npy (<f4, <f2, or bf16 as the 2-byte void dtype
// |V2) or .safetensors file (F32, F16, BF16; `tensor` names it, or empty
// for a file holding one tensor; its header at most 1 MiB) and checks the
// file holds all its values. `id` (optional) receives the file's identity.
absl::StatusOr<TokenFileLayout> OpenTokenFile(const DataPath& path, const std::string& tensor,
                                              FileId* id = nullptr);

// Rows [begin, begin + n) decoded to float32 into dst (n * width floats);
// INVALID_ARGUMENT naming the first non-finite value's token (global).
absl::Status ReadTokenRows(const TokenFileLayout& file, int64_t begin, int64_t n, float* dst);

// A file CreateOutputFile or CreateTokenFile made ready.
struct ReadyFile {
  FileId id;
  bool created = false;  // false: an existing file, replaced as asked
};

// Creates `path` as a float32 [rows, width] .npy of full size (its header
// written; the data zero in a new file, the old bytes in a replaced one,
// until WriteTokenRows fills every row), its blocks reserved:
// RESOURCE_EXHAUSTED if the disk cannot hold it. An existing file is
// ALREADY_EXISTS unless `replace`; INVALID_ARGUMENT if it is the file
// `context` (the job's input under another name).
absl::StatusOr<ReadyFile> CreateOutputFile(const DataPath& path, int64_t rows, int64_t width,
                                           bool replace = false, const FileId* context = nullptr);
// The same for a [rows, width] .npy of `dtype` (bf16 as |V2), the
// coordinator's spool of an in-band context (replaced when it exists);
// OpenTokenFile reads it.
absl::StatusOr<ReadyFile> CreateTokenFile(const DataPath& path, int64_t rows, int64_t width,
                                          WireType dtype);

// Writes rows [begin, begin + n) of a file CreateOutputFile made, in row
// order, a piece at a time (a worker writing its shard's output rows as
// they are made), through a RangeWriter (range_writer.h: the aligned
// middle of a large range straight to the disk). Open checks the header
// still says float32 [rows, width]. Shards of one file may be written at
// once from several processes. One thread at a time.
class OutputRowsWriter {
 public:
  static absl::StatusOr<std::unique_ptr<OutputRowsWriter>> Open(const DataPath& path, int64_t rows,
                                                                int64_t width, int64_t begin,
                                                                int64_t n);
  OutputRowsWriter(const OutputRowsWriter&) = delete;
  OutputRowsWriter& operator=(const OutputRowsWriter&) = delete;
  ~OutputRowsWriter();

  // The next `n` rows (n * width floats); OUT_OF_RANGE past the range.
  absl::Status Append(const float* src, int64_t n);
  // FAILED_PRECONDITION unless every row of the range was appended.
  absl::Status Finish();

 private:
  OutputRowsWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;         // buffered
  int direct_fd_ = -1;  // O_DIRECT, when the file system takes it
  uint64_t row_bytes_ = 0;
  std::unique_ptr<RangeWriter> range_;
};

// Rows [begin, begin + n) of `src` written whole through an OutputRowsWriter.
absl::Status WriteTokenRows(const DataPath& path, int64_t rows, int64_t width, int64_t begin,
                            const float* src, int64_t n);

// A token file CreateTokenFile made, open for rows in its own dtype as raw
// bytes (a worker spooling the in-band context rows it receives). Open
// checks the header says [rows, width] of `dtype`; Write puts whole rows
// at their offsets. Movable; one writer per thread.
class TokenFileWriter {
 public:
  static absl::StatusOr<TokenFileWriter> Open(const DataPath& path, int64_t rows, int64_t width,
                                              WireType dtype);
  TokenFileWriter(TokenFileWriter&& other) noexcept;
  TokenFileWriter& operator=(TokenFileWriter&&) = delete;
  TokenFileWriter(const TokenFileWriter&) = delete;
  ~TokenFileWriter();

  // Says rows [begin, begin + n) will come in order (a shard's, as they
  // are received): their aligned middle then goes straight to the disk
  // through a RangeWriter (range_writer.h), where the file system takes it.
  void ExpectInOrder(int64_t begin, int64_t n);
  // `pieces` hold whole rows, first row `row`.
  absl::Status Write(int64_t row, const std::vector<absl::string_view>& pieces);

 private:
  TokenFileWriter(int fd, TokenFileLayout layout) : fd_(fd), layout_(std::move(layout)) {}
  int fd_;
  int direct_fd_ = -1;
  TokenFileLayout layout_;
  std::unique_ptr<RangeWriter> in_order_;  // from ExpectInOrder
  int64_t next_row_ = -1;                  // the row in_order_ takes next
};

}  // namespace lact

#endif  // LACT_COMMON_DATA_FILES_H_
