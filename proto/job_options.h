// The one conversion between the wire's v1::JobOptions and JobOptions, and
// between v1::DType and WireType.
#ifndef LACT_PROTO_JOB_OPTIONS_H_
#define LACT_PROTO_JOB_OPTIONS_H_

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/token_codec.h"
#include "lact/v1/common.pb.h"

namespace lact {

JobOptions FromProto(const v1::JobOptions& options);
void ToProto(const JobOptions& options, v1::JobOptions* out);

// INVALID_ARGUMENT for DTYPE_UNSPECIFIED or an unknown value.
absl::StatusOr<WireType> FromProto(v1::DType dtype);
v1::DType ToProto(WireType type);

}  // namespace lact

#endif  // LACT_PROTO_JOB_OPTIONS_H_
