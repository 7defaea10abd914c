// What a stream of a shard's results carried, counted as its completion
// message (data.proto, TransferComplete) states it: the messages, their
// data bytes, and the CRC-32C of those bytes in order. The worker tallies
// what it sends and ends the stream with Complete(); the client tallies
// what it reads and Checks the worker's statement against its own.
// CRC-32C is ISA-L's (crc32_iscsi), hardware-accelerated where the CPU
// has it. Not thread-safe: one stream's thread uses it.
#ifndef LACT_PROTO_RESULT_TALLY_H_
#define LACT_PROTO_RESULT_TALLY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lact/v1/data.pb.h"

namespace lact {

// The CRC-32C of `data` appended to bytes whose CRC-32C is `crc` (0 for
// none): Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, absl::string_view data);

class ResultTally {
 public:
  // One message whose data is `data` (in pieces, in order).
  void Add(absl::string_view data);
  void Add(const std::vector<absl::string_view>& pieces);

  v1::TransferComplete Complete() const;
  // OK when `stated` says what was tallied; DATA_LOSS naming what differs
  // otherwise.
  absl::Status Check(const v1::TransferComplete& stated) const;

  int64_t messages() const { return messages_; }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t messages_ = 0;
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace lact

#endif  // LACT_PROTO_RESULT_TALLY_H_
