#include "server/upload_receiver.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace lact::server {

UploadReceiver::UploadReceiver(int64_t context_tokens, std::vector<int64_t> query_tokens, int64_t width,
                               WireType dtype)
    : width_(width), dtype_(dtype) {
  lengths_.push_back(context_tokens);
  for (int64_t n : query_tokens) {
    lengths_.push_back(n);
    queries_.emplace_back(std::vector<int64_t>{n, width});
  }
  received_.assign(lengths_.size(), 0);
}

absl::Status UploadReceiver::Accept(v1::TokenChunk* chunk, const ContextSink& sink) {
  const int64_t bytes = static_cast<int64_t>(chunk->data().size());
  if (bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", bytes, " bytes exceeds the 4 MiB limit"));
  }
  const int set = chunk->set();
  if (set < 0 || set >= static_cast<int>(lengths_.size()) || lengths_[set] == 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk for set ", set, "; this job has ",
                                                   lengths_[0] > 0 ? "set 0 (context) and " : "",
                                                   lengths_.size() - 1, " query sets (sets 1..",
                                                   lengths_.size() - 1, ")"));
  }
  if (chunk->offset() != received_[set]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk for set ", set, " starts at token ", chunk->offset(), "; expected token ", received_[set],
        " (chunks of a set must arrive in order, without gaps or overlaps)"));
  }
  const int64_t row_bytes = WireBytes(dtype_) * width_;
  if (bytes % row_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", bytes, " bytes is not a whole number of ", width_,
                                                   "-wide tokens of ", WireBytes(dtype_), " bytes per value"));
  }
  const int64_t n = bytes / row_bytes;
  if (received_[set] + n > lengths_[set]) {
    return absl::InvalidArgumentError(absl::StrCat("chunk for set ", set, " runs to token ", received_[set] + n,
                                                   ", past the set's ", lengths_[set], " tokens"));
  }
  if (set == 0 && dtype_ == WireType::kF32) {
    LACT_RETURN_IF_ERROR(
        CheckFinite(reinterpret_cast<const float*>(chunk->data().data()), n * width_, width_, chunk->offset()));
    LACT_RETURN_IF_ERROR(sink(chunk->offset(), n, std::move(*chunk->mutable_data())));
  } else {
    float* dst = set == 0 ? nullptr : queries_[set - 1].ptr() + received_[set] * width_;
    if (set == 0) {
      decoded_.resize(n * width_);
      dst = decoded_.data();
    }
    int64_t tokens = 0;
    LACT_RETURN_IF_ERROR(DecodeTokensInto(chunk->data(), dtype_, width_, chunk->offset(), dst, n * width_, &tokens));
    if (set == 0) LACT_RETURN_IF_ERROR(sink(chunk->offset(), n, EncodeTokens(dst, n * width_, WireType::kF32)));
  }
  received_[set] += n;
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status UploadReceiver::CheckComplete() const {
  for (size_t s = 0; s < lengths_.size(); ++s) {
    if (received_[s] != lengths_[s]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the upload ended after ", received_[s], " of the ", lengths_[s], " tokens of ",
                       s == 0 ? std::string("the context") : absl::StrCat("query set ", s - 1)));
    }
  }
  return absl::OkStatus();
}

}  // namespace lact::server
