// gRPC transport settings for the bulk path (ShardDataService.Transfer): HTTP/2
// frames of up to 4 MiB instead of 16 KiB, and a stream window that lets a
// few messages be in flight before the first WINDOW_UPDATE, so a loopback
// or LAN stream moves at memory speed rather than waiting on flow control.
// They change no message-size limit: a client with gRPC's defaults still
// talks to a worker (it just uses smaller frames).
#ifndef LACT_PROTO_BULK_TRANSPORT_H_
#define LACT_PROTO_BULK_TRANSPORT_H_

#include <grpcpp/grpcpp.h>

namespace lact {

grpc::ChannelArguments BulkChannelArguments();
void TuneBulkServer(grpc::ServerBuilder* builder);

}  // namespace lact

#endif  // LACT_PROTO_BULK_TRANSPORT_H_
