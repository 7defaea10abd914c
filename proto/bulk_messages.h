// Zero-copy forms of ShardDataService.Transfer's messages (data.proto) for the
// bulk path. On the wire they are exactly TransferRequest and
// TransferResponse, so a peer using the generated classes interoperates
// (the tests send with generated stubs). What differs is the memory:
//   - BulkOut: a sent chunk's `data` is a gRPC slice pointing at the
//     sender's own buffer, kept alive by a shared owner until gRPC is done
//     with it, so the kernel's copy is the only one;
//   - BulkIn: a received chunk's `data` stays in the slices gRPC received
//     it in (DataPieces), to be decoded once into its destination.
// gRPC takes them through grpc::SerializationTraits, its hook for message
// types other than protobuf's (as FlatBuffers' gRPC support uses it), and
// ShardDataMethod names the one rpc for the stub and the service.
#ifndef LACT_PROTO_BULK_MESSAGES_H_
#define LACT_PROTO_BULK_MESSAGES_H_

#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/impl/serialization_traits.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"

namespace lact {

inline constexpr char kShardDataTransfer[] = "/lact.v1.ShardDataService/Transfer";
inline constexpr char kShardDataFetchResult[] = "/lact.v1.ShardDataService/FetchResult";

// A message to send. Either `whole` (any small message, serialized), or
// the oneof field `outer_field` of the outer message holding an inner
// message (`inner_head`: its fields but the data, serialized) whose bytes
// field 3 is `data`.
struct BulkOut {
  std::string whole;
  int outer_field = 0;
  std::string inner_head;
  absl::string_view data;
  std::shared_ptr<const void> keep_alive;  // owns `data` until gRPC releases it

  static BulkOut Whole(const google::protobuf::MessageLite& message);
  static BulkOut Chunk(int outer_field, const google::protobuf::MessageLite& inner_without_data,
                       absl::string_view data, std::shared_ptr<const void> keep_alive);
};

// A received message: the oneof field it fills, that field's message
// without its bytes field 3 when the field carries bulk data (`head`,
// parse it with the inner type), the data as pieces of the received
// slices, and the slices themselves (which keep the pieces alive).
struct BulkIn {
  int outer_field = 0;
  std::string head;
  std::vector<absl::string_view> data;
  int64_t data_size = 0;
  std::vector<grpc::Slice> slices;
};

// BulkIn for TransferRequest (bulk field: 2, chunk) and TransferResponse
// (bulk fields: 1, output; 2, state).
struct TransferRequestIn : BulkIn {};
struct TransferResponseIn : BulkIn {};

// Splits a received buffer into a BulkIn; `bulk_fields` are the outer
// fields whose inner message has bytes field 3 to leave in place.
grpc::Status ParseBulk(grpc::ByteBuffer* buffer, const std::vector<int>& bulk_fields, BulkIn* out);
grpc::Status SerializeBulk(const BulkOut& message, grpc::ByteBuffer* buffer);

}  // namespace lact

namespace grpc {

template <>
class SerializationTraits<lact::BulkOut, void> {
 public:
  static Status Serialize(const lact::BulkOut& message, ByteBuffer* buffer, bool* own_buffer) {
    *own_buffer = true;
    return lact::SerializeBulk(message, buffer);
  }
  static Status Deserialize(ByteBuffer*, lact::BulkOut*) {
    return Status(StatusCode::INTERNAL, "BulkOut is only sent");
  }
};

template <>
class SerializationTraits<lact::TransferRequestIn, void> {
 public:
  static Status Serialize(const lact::TransferRequestIn&, ByteBuffer*, bool*) {
    return Status(StatusCode::INTERNAL, "TransferRequestIn is only received");
  }
  static Status Deserialize(ByteBuffer* buffer, lact::TransferRequestIn* message) {
    return lact::ParseBulk(buffer, {2}, message);
  }
};

template <>
class SerializationTraits<lact::TransferResponseIn, void> {
 public:
  static Status Serialize(const lact::TransferResponseIn&, ByteBuffer*, bool*) {
    return Status(StatusCode::INTERNAL, "TransferResponseIn is only received");
  }
  static Status Deserialize(ByteBuffer* buffer, lact::TransferResponseIn* message) {
    return lact::ParseBulk(buffer, {1, 2}, message);
  }
};

}  // namespace grpc

#endif  // LACT_PROTO_BULK_MESSAGES_H_
