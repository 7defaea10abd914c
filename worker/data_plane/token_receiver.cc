#include "worker/data_plane/token_receiver.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/wire_limits.h"

namespace lact {

TokenReceiver::TokenReceiver(std::vector<int64_t> lengths, int64_t width, WireType dtype,
                             int64_t context_begin, bool huge_pages)
    : lengths_(std::move(lengths)),
      width_(width),
      dtype_(dtype),
      context_begin_(context_begin),
      huge_pages_(huge_pages) {
  received_.assign(lengths_.size(), 0);
  // Shapes only: a set's memory is reserved at its first chunk and filled
  // as chunks come, so a declared set that never arrives holds none.
  for (int64_t n : lengths_) {
    Tensor t;
    t.shape = {n, width};
    sets_.push_back(std::move(t));
  }
}

absl::Status TokenReceiver::Accept(const v1::TokenChunk& chunk) {
  return Accept(chunk.set(), chunk.offset(), {absl::string_view(chunk.data())},
                static_cast<int64_t>(chunk.data().size()));
}

absl::Status TokenReceiver::Accept(int set, int64_t offset,
                                   const std::vector<absl::string_view>& data, int64_t bytes) {
  if (bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes exceeds the 4 MiB limit"));
  }
  if (set < 0 || set >= static_cast<int>(lengths_.size()) || lengths_[set] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk for set ", set, "; this shard takes ", lengths_[0] > 0 ? "set 0 (context) and " : "",
        lengths_.size() - 1, " query sets (sets 1..", lengths_.size() - 1, ")"));
  }
  if (offset != received_[set]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk for set ", set, " starts at token ", offset, "; expected token ", received_[set],
        " (chunks of a set must arrive in order, without gaps or overlaps)"));
  }
  const int64_t row_bytes = WireBytes(dtype_) * width_;
  if (bytes % row_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes is not a whole number of ", width_,
                     "-wide tokens of ", WireBytes(dtype_), " bytes per value"));
  }
  const int64_t n = bytes / row_bytes;
  if (received_[set] + n > lengths_[set]) {
    return absl::InvalidArgumentError(absl::StrCat("chunk for set ", set, " runs to token ",
                                                   received_[set] + n, ", past the set's ",
                                                   lengths_[set], " tokens"));
  }
  const int64_t first_token = (set == 0 ? context_begin_ : 0) + received_[set];
  std::vector<float>& values = sets_[set].data;
  if (values.capacity() == 0) {
    try {
      values.reserve(static_cast<size_t>(lengths_[set] * width_));  // address space, not pages
      if (huge_pages_) AdviseHugePages(values.data(), values.capacity() * sizeof(float));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot reserve memory for set ", set, "'s ",
                                                       lengths_[set], " tokens of width ", width_));
    }
  }
  values.resize(values.size() + static_cast<size_t>(n * width_));
  int64_t tokens = 0;
  if (absl::Status s =
          DecodeTokenPiecesInto(data, dtype_, width_, first_token,
                                values.data() + received_[set] * width_, n * width_, &tokens);
      !s.ok()) {
    values.resize(static_cast<size_t>(received_[set] * width_));
    return s;
  }
  received_[set] += n;
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status TokenReceiver::CheckComplete() const {
  for (size_t s = 0; s < lengths_.size(); ++s) {
    if (received_[s] != lengths_[s]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the upload ended after ", received_[s], " of the ", lengths_[s], " tokens of ",
          s == 0 ? std::string("the shard's context") : absl::StrCat("query set ", s - 1)));
    }
  }
  return absl::OkStatus();
}

}  // namespace lact
