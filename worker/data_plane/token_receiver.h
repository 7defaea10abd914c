// Checks and decodes the token chunks a client sends a worker for one
// shard: each chunk names its set (0 = the shard's context rows, k + 1 =
// query set k) and first token; chunks of a set must arrive in order
// without gaps or overlaps, hold whole tokens of the job's width and dtype,
// be at most 4 MiB and finite. Each chunk is decoded once, straight into
// its set's float32 tensor; a set's memory is reserved at its first chunk
// (in huge pages where the kernel has them) and its pages touched only as
// chunks fill them, so tokens declared but never sent hold no memory.
// Errors are INVALID_ARGUMENT saying what was wrong and what is allowed;
// context tokens are named by their index in the whole context. Not
// thread-safe.
#ifndef LACT_WORKER_DATA_PLANE_TOKEN_RECEIVER_H_
#define LACT_WORKER_DATA_PLANE_TOKEN_RECEIVER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/common.pb.h"

namespace lact {

class TokenReceiver {
 public:
  // `lengths[s]` tokens in set s (set 0 may be 0: a context that does not
  // come in band); the context's first token is `context_begin` globally.
  // `huge_pages`: a set's memory is advised to the kernel as huge pages
  // (common/huge_pages.h).
  TokenReceiver(std::vector<int64_t> lengths, int64_t width, WireType dtype, int64_t context_begin,
                bool huge_pages = true);

  absl::Status Accept(const v1::TokenChunk& chunk);
  // The same for a chunk whose data arrived in pieces (proto/bulk_messages.h).
  absl::Status Accept(int set, int64_t offset, const std::vector<absl::string_view>& data,
                      int64_t bytes);
  // OK when every set is complete; otherwise INVALID_ARGUMENT saying what is missing.
  absl::Status CheckComplete() const;

  int64_t bytes_received() const { return bytes_; }
  // The memory `wire_bytes` of tokens take once decoded (float32).
  int64_t DecodedBytes(int64_t wire_bytes) const { return wire_bytes / WireBytes(dtype_) * 4; }
  Tensor TakeSet(int set) { return std::move(sets_[set]); }
  // Frees every set's memory (an upload that failed).
  void Clear() {
    for (Tensor& t : sets_) t = Tensor();
  }

 private:
  std::vector<int64_t> lengths_, received_;
  int64_t width_;
  WireType dtype_;
  int64_t context_begin_;
  bool huge_pages_;
  int64_t bytes_ = 0;
  std::vector<Tensor> sets_;
};

}  // namespace lact

#endif  // LACT_WORKER_DATA_PLANE_TOKEN_RECEIVER_H_
