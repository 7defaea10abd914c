// Reading and writing the safetensors format (8-byte little-endian header
// length, a JSON header, then the raw tensor bytes).
//
// SafetensorsFile maps the file read-only and validates the whole header up
// front: every failure (truncated file, bad JSON, unknown dtype, offsets out of
// range or not matching the shape) is INVALID_ARGUMENT naming the file and,
// where there is one, the tensor. Reads convert F32/F16/BF16/F64 to the asked
// type. The object is immutable after Open() and safe to read from many threads.
#ifndef LACT_COMMON_SAFETENSORS_H_
#define LACT_COMMON_SAFETENSORS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_file.h"
#include "common/tensor.h"

namespace lact {

enum class DType { kF32, kF16, kBF16, kF64 };

const char* DTypeName(DType dtype);

struct TensorEntry {
  DType dtype;
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the data section
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // A file already mapped, its header at most `max_header_bytes` (checked
  // before it is parsed).
  static absl::StatusOr<SafetensorsFile> FromMapped(MappedFile file, uint64_t max_header_bytes);

  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }
  // Byte offset of the data section in the file (TensorEntry::offset is from here).
  size_t data_start() const { return data_start_; }

  // NOT_FOUND when the tensor is absent.
  absl::StatusOr<Tensor> ReadFloat(const std::string& name) const;
  absl::StatusOr<TensorD> ReadDouble(const std::string& name) const;

 private:
  SafetensorsFile(MappedFile file, size_t data_start)
      : file_(std::move(file)), data_start_(data_start) {}
  absl::Status ParseHeader(const std::string& header);
  template <typename T>
  absl::StatusOr<BasicTensor<T>> Read(const std::string& name) const;

  MappedFile file_;
  size_t data_start_;
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Collects float32 tensors by reference and writes them in one file
// (through SafetensorsOut, in name order). The tensors must outlive
// Write(). Names must be unique.
class SafetensorsWriter {
 public:
  void Add(const std::string& name, const Tensor& tensor) { tensors_[name] = &tensor; }
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  absl::Status Write(const std::string& path) const;

 private:
  std::map<std::string, const Tensor*> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lact

#endif  // LACT_COMMON_SAFETENSORS_H_
