// The one place where absl::Status and grpc::Status meet (the RPC edge):
// servers convert once, where a call ends (stream_call.h, write_call.h, a
// unary call's reply); clients once, where a call they made ends.
#ifndef LACT_PROTO_STATUS_CONVERSION_H_
#define LACT_PROTO_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lact {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// The same, the message prefixed with `where` and ": " (OK stays OK).
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view where);

}  // namespace lact

#endif  // LACT_PROTO_STATUS_CONVERSION_H_
