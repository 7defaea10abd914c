#include "proto/bulk_messages.h"

#include <algorithm>

namespace lact {
namespace {

constexpr int kDataField = 3;
constexpr int kLengthDelimited = 2;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Reads across the slices of a received message.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) { Skip(); }

  bool done() const { return index_ == slices_.size(); }
  int64_t position() const { return position_; }

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[index_].begin()[offset_];
    Advance(1);
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // The next n bytes as pieces of the slices.
  bool Pieces(uint64_t n, std::vector<absl::string_view>* pieces) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[index_];
      const size_t take = std::min<uint64_t>(n, s.size() - offset_);
      pieces->emplace_back(reinterpret_cast<const char*>(s.begin()) + offset_, take);
      Advance(take);
      n -= take;
    }
    return true;
  }
  bool Append(uint64_t n, std::string* out) {
    std::vector<absl::string_view> pieces;
    if (!Pieces(n, &pieces)) return false;
    for (absl::string_view p : pieces) out->append(p.data(), p.size());
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    position_ += static_cast<int64_t>(n);
    Skip();
  }
  void Skip() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0, offset_ = 0;
  int64_t position_ = 0;
};

// Copies one field (its tag already read) into `out`, tag included.
bool CopyField(SliceReader& r, uint64_t tag, std::string* out) {
  PutVarint(tag, out);
  uint64_t v;
  switch (tag & 7) {
    case 0:
      if (!r.Varint(&v)) return false;
      PutVarint(v, out);
      return true;
    case 1:
      return r.Append(8, out);
    case 5:
      return r.Append(4, out);
    case 2:
      if (!r.Varint(&v)) return false;
      PutVarint(v, out);
      return r.Append(v, out);
    default:
      return false;
  }
}

grpc::Status Malformed(const char* what) {
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      std::string("malformed ShardData message: ") + what);
}

// The inner message of `length` bytes: every field but data into head, data as pieces.
grpc::Status ParseInner(SliceReader& r, uint64_t length, BulkIn* out) {
  const int64_t end = r.position() + static_cast<int64_t>(length);
  while (r.position() < end) {
    uint64_t tag;
    if (!r.Varint(&tag)) return Malformed("truncated field tag");
    if ((tag >> 3) == kDataField && (tag & 7) == kLengthDelimited) {
      uint64_t n;
      if (!r.Varint(&n) || !r.Pieces(n, &out->data)) return Malformed("truncated data");
      out->data_size += static_cast<int64_t>(n);
    } else if (!CopyField(r, tag, &out->head)) {
      return Malformed("truncated field");
    }
  }
  return r.position() == end ? grpc::Status::OK : Malformed("inner message overruns its length");
}

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace

BulkOut BulkOut::Whole(const google::protobuf::MessageLite& message) {
  BulkOut out;
  out.whole = message.SerializeAsString();
  return out;
}

BulkOut BulkOut::Chunk(int outer_field, const google::protobuf::MessageLite& inner_without_data,
                       absl::string_view data, std::shared_ptr<const void> keep_alive) {
  BulkOut out;
  out.outer_field = outer_field;
  out.inner_head = inner_without_data.SerializeAsString();
  out.data = data;
  out.keep_alive = std::move(keep_alive);
  return out;
}

grpc::Status SerializeBulk(const BulkOut& message, grpc::ByteBuffer* buffer) {
  if (message.outer_field == 0) {
    grpc::Slice slice(message.whole.data(), message.whole.size());
    *buffer = grpc::ByteBuffer(&slice, 1);
    return grpc::Status::OK;
  }
  const uint64_t n = message.data.size();
  const uint64_t inner = message.inner_head.size() + 1 + VarintSize(n) + n;
  std::string prefix;
  PutVarint((static_cast<uint64_t>(message.outer_field) << 3) | kLengthDelimited, &prefix);
  PutVarint(inner, &prefix);
  prefix += message.inner_head;
  PutVarint((kDataField << 3) | kLengthDelimited, &prefix);
  PutVarint(n, &prefix);
  std::vector<grpc::Slice> slices;
  slices.emplace_back(prefix.data(), prefix.size());
  if (n > 0) {
    auto* owner = new std::shared_ptr<const void>(message.keep_alive);
    slices.emplace_back(const_cast<char*>(message.data.data()), n, &ReleaseOwner, owner);
  }
  *buffer = grpc::ByteBuffer(slices.data(), slices.size());
  return grpc::Status::OK;
}

grpc::Status ParseBulk(grpc::ByteBuffer* buffer, const std::vector<int>& bulk_fields, BulkIn* out) {
  if (buffer == nullptr) return Malformed("no payload");
  if (!buffer->Dump(&out->slices).ok()) return Malformed("unreadable buffer");
  buffer->Clear();
  SliceReader r(out->slices);
  while (!r.done()) {
    uint64_t tag, length;
    if (!r.Varint(&tag) || (tag & 7) != kLengthDelimited || !r.Varint(&length)) {
      return Malformed("expected a message field");
    }
    const int field = static_cast<int>(tag >> 3);
    if (out->outer_field != 0) return Malformed("more than one field of the oneof");
    out->outer_field = field;
    if (std::find(bulk_fields.begin(), bulk_fields.end(), field) != bulk_fields.end()) {
      grpc::Status s = ParseInner(r, length, out);
      if (!s.ok()) return s;
    } else if (!r.Append(length, &out->head)) {
      return Malformed("truncated message field");
    }
  }
  return grpc::Status::OK;
}

}  // namespace lact
