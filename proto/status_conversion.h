// The one place where absl::Status and grpc::Status meet (the RPC edge).
#ifndef LACT_PROTO_STATUS_CONVERSION_H_
#define LACT_PROTO_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace lact {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// "OK", "NOT_FOUND", ...: a gRPC code's name, as metrics and logs label it.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace lact

#endif  // LACT_PROTO_STATUS_CONVERSION_H_
