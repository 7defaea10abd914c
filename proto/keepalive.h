// gRPC keepalive on every lact channel and server: each side pings a peer
// whose connection has been quiet for kKeepaliveTime and closes the
// connection when a ping goes unanswered for kKeepaliveTimeout, so a
// stopped or wedged process, or a host gone behind an open TCP
// connection, ends the calls on it with UNAVAILABLE in well under a
// minute instead of at their deadlines. Servers accept pings that often.
#ifndef LACT_PROTO_KEEPALIVE_H_
#define LACT_PROTO_KEEPALIVE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>

namespace lact {

inline constexpr std::chrono::seconds kKeepaliveTime{10};
inline constexpr std::chrono::seconds kKeepaliveTimeout{20};

void SetKeepalive(grpc::ChannelArguments* args);
void SetKeepalive(grpc::ServerBuilder* builder);

}  // namespace lact

#endif  // LACT_PROTO_KEEPALIVE_H_
