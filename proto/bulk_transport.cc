#include "proto/bulk_transport.h"

namespace lact {
namespace {

constexpr int kFrameBytes = 4 << 20;
constexpr int kWindowBytes = 32 << 20;

}  // namespace

grpc::ChannelArguments BulkChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kFrameBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWindowBytes);
  return args;
}

void TuneBulkServer(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kFrameBytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWindowBytes);
}

}  // namespace lact
