// Checks and decodes the token chunks a client uploads for a job: each
// chunk names its set (0 = context, k + 1 = query set k) and first token;
// chunks of a set must arrive in order without gaps or overlaps, hold whole
// tokens of the job's width and dtype, be at most 4 MiB and finite. Context
// rows go straight to a sink as float32 bytes (f32 chunks are passed on
// without a copy; never buffered here); query rows, small by admission
// limits, are kept until the context is done. Not thread-safe.
#ifndef LACT_SERVER_UPLOAD_RECEIVER_H_
#define LACT_SERVER_UPLOAD_RECEIVER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "common/token_codec.h"
#include "lact/v1/common.pb.h"

namespace lact::server {

inline constexpr int64_t kMaxChunkBytes = 4 << 20;

class UploadReceiver {
 public:
  // (first token, tokens, their float32 bytes)
  using ContextSink = std::function<absl::Status(int64_t offset, int64_t tokens, std::string f32_bytes)>;

  UploadReceiver(int64_t context_tokens, std::vector<int64_t> query_tokens, int64_t width, WireType dtype);

  // Takes the chunk's bytes.
  absl::Status Accept(v1::TokenChunk* chunk, const ContextSink& sink);
  // OK when every set is complete; otherwise INVALID_ARGUMENT saying what is missing.
  absl::Status CheckComplete() const;

  int64_t context_received() const { return received_[0]; }
  int64_t bytes_received() const { return bytes_; }
  std::vector<Tensor> TakeQueries() { return std::move(queries_); }

 private:
  std::vector<int64_t> lengths_, received_;  // per set
  int64_t width_;
  WireType dtype_;
  int64_t bytes_ = 0;
  std::vector<Tensor> queries_;
  std::vector<float> decoded_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_UPLOAD_RECEIVER_H_
