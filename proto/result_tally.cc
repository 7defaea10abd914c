#include "proto/result_tally.h"

#include <isa-l/crc.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lact {

uint32_t Crc32c(uint32_t crc, absl::string_view data) {
  // crc32_iscsi works on the register, before the final inversion.
  uint32_t reg = ~crc;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    const size_t n = std::min<size_t>(left, std::numeric_limits<int>::max());
    reg = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), reg);
    p += n;
    left -= n;
  }
  return ~reg;
}

void ResultTally::Add(absl::string_view data) {
  ++messages_;
  bytes_ += static_cast<int64_t>(data.size());
  crc_ = Crc32c(crc_, data);
}

void ResultTally::Add(const std::vector<absl::string_view>& pieces) {
  ++messages_;
  for (absl::string_view piece : pieces) {
    bytes_ += static_cast<int64_t>(piece.size());
    crc_ = Crc32c(crc_, piece);
  }
}

v1::TransferComplete ResultTally::Complete() const {
  v1::TransferComplete complete;
  complete.set_messages(messages_);
  complete.set_bytes(bytes_);
  complete.set_crc32c(crc_);
  return complete;
}

absl::Status ResultTally::Check(const v1::TransferComplete& stated) const {
  if (stated.messages() != messages_ || stated.bytes() != bytes_) {
    return absl::DataLossError(absl::StrCat("the worker says it sent ", stated.messages(),
                                            " messages of ", stated.bytes(), " bytes; ", messages_,
                                            " messages of ", bytes_, " bytes arrived"));
  }
  if (stated.crc32c() != crc_) {
    return absl::DataLossError(
        absl::StrFormat("the CRC-32C of the %d bytes that arrived is %08x, the worker's of what "
                        "it sent %08x: bytes changed on the way",
                        bytes_, crc_, stated.crc32c()));
  }
  return absl::OkStatus();
}

}  // namespace lact
