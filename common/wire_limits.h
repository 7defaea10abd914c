// Message-size limits shared by every process. A client built with gRPC's
// defaults receives at most 4 MiB per message, so every message a lact
// process sends to a client stays under that, protobuf framing included;
// chunk payloads a client sends may be up to 4 MiB (servers accept larger
// messages, kMaxServerMessageBytes, for that framing and for internal calls).
#ifndef LACT_COMMON_WIRE_LIMITS_H_
#define LACT_COMMON_WIRE_LIMITS_H_

#include <algorithm>
#include <cstdint>

namespace lact {

// Largest token-chunk payload a client may send.
inline constexpr int64_t kMaxChunkBytes = int64_t{4} << 20;
// Largest payload a lact process puts in one message it sends: the framing
// of a TokenChunk or Tensor message fits in the rest of 4 MiB.
inline constexpr int64_t kMaxSendPayloadBytes = (int64_t{4} << 20) - (int64_t{16} << 10);
// Receive limit of every lact server and client channel.
inline constexpr int kMaxServerMessageBytes = 64 << 20;

// Whole rows of `row_bytes` per message, at least one.
inline int64_t RowsPerMessage(int64_t row_bytes, int64_t payload_bytes = kMaxSendPayloadBytes) {
  return row_bytes >= payload_bytes ? 1 : payload_bytes / row_bytes;
}

// The one chunked writer's loop: send(first, n) for consecutive runs of
// `rows` rows of `row_bytes`, each run as many whole rows as fit one
// message. Stops at, and returns, the first false send.
template <typename Send>
bool SendInMessages(int64_t rows, int64_t row_bytes, Send send) {
  const int64_t per_message = RowsPerMessage(row_bytes);
  for (int64_t first = 0; first < rows; first += per_message) {
    if (!send(first, std::min(per_message, rows - first))) return false;
  }
  return true;
}

}  // namespace lact

#endif  // LACT_COMMON_WIRE_LIMITS_H_
