#include "proto/keepalive.h"

namespace lact {
namespace {

constexpr int Ms(std::chrono::seconds s) {
  return static_cast<int>(std::chrono::milliseconds(s).count());
}

}  // namespace

void SetKeepalive(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(kKeepaliveTime));
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(kKeepaliveTimeout));
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

void SetKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(kKeepaliveTime));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(kKeepaliveTimeout));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients ping every kKeepaliveTime; a server that took that for abuse
  // would close their connections (GOAWAY too_many_pings).
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              Ms(kKeepaliveTime) / 2);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

}  // namespace lact
