// Read-only memory mapping of a whole regular file (RAII). Movable, not
// copyable. Open() fails with NOT_FOUND / INVALID_ARGUMENT naming the path;
// it never blocks on a FIFO (opened non-blocking, refused as not regular).
#ifndef LACT_COMMON_MAPPED_FILE_H_
#define LACT_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace lact {

class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  // Maps the regular file open at `fd` (the caller keeps `fd`); errors
  // call it `name`.
  static absl::StatusOr<MappedFile> FromDescriptor(int fd, const std::string& name);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lact

#endif  // LACT_COMMON_MAPPED_FILE_H_
