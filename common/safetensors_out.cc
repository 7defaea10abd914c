#include "common/safetensors_out.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace lact {

absl::StatusOr<std::unique_ptr<SafetensorsOut>> SafetensorsOut::Create(
    const std::string& path, const std::map<std::string, std::string>& metadata,
    const std::vector<Planned>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::map<std::string, Placed> placed;
  uint64_t offset = 0;
  for (const Planned& t : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(Tensor::NumElements(t.shape)) * sizeof(float);
    if (!placed.emplace(t.name, Placed{t.shape, offset, offset + nbytes}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "': tensor '", t.name, "' given twice"));
    }
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  const uint64_t block = RangeWriter::kDirectBlock;
  text.append((block - (8 + text.size()) % block) % block, ' ');
  const uint64_t data_start = 8 + text.size();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsOut> out(new SafetensorsOut(path, fd));
  for (auto& [name, p] : placed) {
    p.begin += data_start;
    p.end += data_start;
  }
  out->placed_ = std::move(placed);
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i)
    head[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  head += text;
  LACT_RETURN_IF_ERROR(FullPwrite(fd, head.data(), head.size(), 0, path));
  if (ftruncate(fd, static_cast<off_t>(data_start + offset)) != 0) {
    return absl::DataLossError(absl::StrCat("sizing '", path, "': ", std::strerror(errno)));
  }
  bool large = false;  // a tensor whose rows a RangeWriter may send straight to the disk
  for (const auto& [name, p] : out->placed_)
    large = large || p.end - p.begin >= RangeWriter::kDirectMinBytes;
  if (large) out->direct_fd_ = open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);  // -1: none
  return out;
}

SafetensorsOut::~SafetensorsOut() {
  if (fd_ >= 0) close(fd_);
  if (direct_fd_ >= 0) close(direct_fd_);
}

absl::StatusOr<const SafetensorsOut::Placed*> SafetensorsOut::Find(const std::string& name) const {
  const auto it = placed_.find(name);
  if (it == placed_.end()) {
    return absl::NotFoundError(absl::StrCat("'", path_, "' has no tensor '", name, "'"));
  }
  return &it->second;
}

absl::StatusOr<std::unique_ptr<RangeWriter>> SafetensorsOut::Rows(const std::string& name,
                                                                  uint64_t offset,
                                                                  uint64_t size) const {
  LACT_ASSIGN_OR_RETURN(const Placed* p, Find(name));
  if (offset > p->end - p->begin || size > p->end - p->begin - offset) {
    return absl::OutOfRangeError(absl::StrCat("'", path_, "': bytes [", offset, ", ", offset + size,
                                              ") lie outside tensor '", name, "' of ",
                                              p->end - p->begin));
  }
  return std::make_unique<RangeWriter>(path_, fd_, direct_fd_, p->begin + offset,
                                       p->begin + offset + size);
}

absl::Status SafetensorsOut::Write(const std::string& name, const Tensor& tensor) const {
  LACT_ASSIGN_OR_RETURN(const Placed* p, Find(name));
  if (tensor.shape != p->shape) {
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "': tensor '", name, "' is ",
                                                      ShapeString(tensor.shape), ", not the ",
                                                      ShapeString(p->shape), " planned"));
  }
  return FullPwrite(fd_, reinterpret_cast<const char*>(tensor.ptr()), p->end - p->begin, p->begin,
                    path_);
}

absl::Status SafetensorsOut::Finish() {
  if (direct_fd_ >= 0) close(direct_fd_);
  direct_fd_ = -1;
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    return absl::DataLossError(
        absl::StrCat("writing '", path_, "' failed: ", std::strerror(errno), " (disk full?)"));
  }
  return absl::OkStatus();
}

}  // namespace lact
