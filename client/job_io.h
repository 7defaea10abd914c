// What a job takes in and gives back, as the C++ client speaks of it: one
// typed input (ContextInput: a tensor sent in band, a file the workers
// read, or rows read as they are sent) and one typed output (OutputTarget:
// memory, rows written as they arrive, e.g. to a file, or a file the
// workers write), and the JobResult. LactClient (lact_client.h) and its
// transfers (job_transfers.h) both include this header; neither
// includes the other's.
#ifndef LACT_CLIENT_JOB_IO_H_
#define LACT_CLIENT_JOB_IO_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/range_writer.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.pb.h"

namespace lact {

// Rows of a context the client sends without holding it whole: `read`
// fills rows [begin, begin + n) as float32 ([n, width]); it is called from
// the shards' threads at once, for disjoint rows, and again for rows sent
// again (a job that runs again).
struct ContextSource {
  int64_t tokens = 0;
  int64_t width = 0;
  std::function<absl::Status(int64_t begin, int64_t n, float* out)> read;
};

// Rows already in a wire dtype (common/token_codec.h: little-endian f32,
// bf16 or f16 elements), [tokens, width] and contiguous, in the caller's
// memory: each message's bytes are sent from it as they are, with no copy
// (the Python client's arrays). The job's dtype must be `dtype`.
struct WireRows {
  const void* data = nullptr;
  int64_t tokens = 0;
  int64_t width = 0;
  WireType dtype = WireType::kF32;
};

// A file inside the cluster's data root (DataRef, common.proto).
struct FileRef {
  std::string path;
  std::string tensor;    // input: a .safetensors file's tensor ("": its only one)
  bool replace = false;  // output: the file may exist already (DataRef.replace)
};

// Where a job's context comes from: exactly one of the four.
class ContextInput {
 public:
  // A tensor [L, width], sent in band; it must outlive the Submit call. A
  // Tensor converts to this implicitly.
  ContextInput(const Tensor& tensor) : kind_(Kind::kTensor), tensor_(&tensor) {}
  // A file the workers read themselves (JobSpec.context_ref).
  static ContextInput File(FileRef file) {
    ContextInput in;
    in.kind_ = Kind::kFile;
    in.file_ = std::move(file);
    return in;
  }
  // Rows read as they are sent (ContextSource).
  static ContextInput Source(ContextSource source) {
    ContextInput in;
    in.kind_ = Kind::kSource;
    in.source_ = std::move(source);
    return in;
  }

  // Wire rows sent from the caller's memory (WireRows), which must
  // outlive the job's transfers.
  static ContextInput Wire(WireRows rows) {
    ContextInput in;
    in.kind_ = Kind::kWire;
    in.wire_ = rows;
    return in;
  }

  // Null unless given as a tensor, a file, a source or wire rows.
  const Tensor* tensor() const { return kind_ == Kind::kTensor ? tensor_ : nullptr; }
  const FileRef* file() const { return kind_ == Kind::kFile ? &file_ : nullptr; }
  const ContextSource* source() const { return kind_ == Kind::kSource ? &source_ : nullptr; }
  const WireRows* wire() const { return kind_ == Kind::kWire ? &wire_ : nullptr; }
  // Tokens and width of a context sent in band; 0 for a file (the workers
  // take them from it).
  int64_t tokens() const;
  int64_t width() const;
  // OK for a tensor, source or wire rows of [L >= 1, width >= 1] and a
  // file with a path; INVALID_ARGUMENT saying which otherwise.
  absl::Status Check() const;
  // OK unless the context is wire rows of a dtype other than the job's
  // `dtype` (INVALID_ARGUMENT naming both).
  absl::Status CheckDtype(WireType dtype) const;

 private:
  enum class Kind { kTensor, kFile, kSource, kWire };
  ContextInput() = default;
  Kind kind_ = Kind::kTensor;
  const Tensor* tensor_ = nullptr;
  FileRef file_;
  ContextSource source_;
  WireRows wire_;
};

// A writer of context output rows as they arrive: asked once per shard for
// rows [begin, begin + n) as float32 bytes (again should its rows come
// again), and used from that shard's thread.
using OutputRowsTarget =
    std::function<absl::StatusOr<std::unique_ptr<RangeWriter>>(int64_t begin, int64_t n)>;

// Where a job's context outputs go: exactly one of the four.
class OutputTarget {
 public:
  // JobResult.output (the default).
  static OutputTarget Memory() { return OutputTarget(); }
  // Rows written as they arrive (e.g. to a file the client writes), not
  // held in memory; JobResult.output stays empty.
  static OutputTarget Rows(OutputRowsTarget rows) {
    OutputTarget out;
    out.rows_ = std::move(rows);
    return out;
  }
  // The caller's memory: `rows` holds [context tokens, output width]
  // float32 values (the JobAccepted's) and outlives the job's transfers;
  // JobResult.output stays empty.
  static OutputTarget Buffer(float* rows) {
    OutputTarget out;
    out.buffer_ = rows;
    return out;
  }
  // A file the workers write themselves (JobSpec.output_ref); no rows
  // come back.
  static OutputTarget File(FileRef file) {
    OutputTarget out;
    out.file_ = std::move(file);
    out.by_reference_ = true;
    return out;
  }

  bool in_band() const { return !by_reference_; }
  // Null unless given as Rows, Buffer or File.
  const OutputRowsTarget* rows() const { return rows_ ? &rows_ : nullptr; }
  float* buffer() const { return buffer_; }
  const FileRef* file() const { return by_reference_ ? &file_ : nullptr; }

 private:
  OutputRowsTarget rows_;
  float* buffer_ = nullptr;
  FileRef file_;
  bool by_reference_ = false;
};

struct JobResult {
  std::string job_id;
  Tensor output;                        // [L, d_out], for OutputTarget::Memory
  std::vector<Tensor> queries;          // [L_k, d_out]
  std::map<std::string, Tensor> state;  // docs/model.md, The fused state names (if asked)
  std::vector<v1::ShardRange> shards;
  v1::JobStats stats;
};

}  // namespace lact

#endif  // LACT_CLIENT_JOB_IO_H_
