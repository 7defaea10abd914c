// A float32 safetensors file written in place: its tensors are named and
// shaped up front, the header goes first, and their bytes then land at
// their own offsets, from any thread and in any order. The data starts at
// a 4 KiB boundary (the header padded with spaces, as the format allows),
// the first tensor planned first, so that the rows of a large tensor can
// go to the disk through RangeWriters (range_writer.h) while they arrive.
// SafetensorsWriter (safetensors.h) writes through it.
#ifndef LACT_COMMON_SAFETENSORS_OUT_H_
#define LACT_COMMON_SAFETENSORS_OUT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/range_writer.h"
#include "common/tensor.h"

namespace lact {

class SafetensorsOut {
 public:
  struct Planned {
    std::string name;
    std::vector<int64_t> shape;
  };

  // Creates (or truncates) `path` with the header for `tensors`, in that
  // order in the data, and gives the file its full size. INVALID_ARGUMENT
  // for a file that cannot be created or a name given twice.
  static absl::StatusOr<std::unique_ptr<SafetensorsOut>> Create(
      const std::string& path, const std::map<std::string, std::string>& metadata,
      const std::vector<Planned>& tensors);
  SafetensorsOut(const SafetensorsOut&) = delete;
  SafetensorsOut& operator=(const SafetensorsOut&) = delete;
  ~SafetensorsOut();

  // Writes bytes [offset, offset + size) of tensor `name` in order, from
  // one thread; the writer must not outlive this object. NOT_FOUND for a
  // name not planned, OUT_OF_RANGE for bytes outside the tensor.
  absl::StatusOr<std::unique_ptr<RangeWriter>> Rows(const std::string& name, uint64_t offset,
                                                    uint64_t size) const;
  // A whole tensor at once; FAILED_PRECONDITION unless its shape is the
  // planned one.
  absl::Status Write(const std::string& name, const Tensor& tensor) const;
  // Closes the file; DATA_LOSS if the disk did not take it all.
  absl::Status Finish();

 private:
  struct Placed {
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // file offsets
  };
  SafetensorsOut(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::StatusOr<const Placed*> Find(const std::string& name) const;

  const std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;
  std::map<std::string, Placed> placed_;
};

}  // namespace lact

#endif  // LACT_COMMON_SAFETENSORS_OUT_H_
