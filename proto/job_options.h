// The one conversion between the wire's v1::JobOptions and JobOptions.
#ifndef LACT_PROTO_JOB_OPTIONS_H_
#define LACT_PROTO_JOB_OPTIONS_H_

#include "common/model_config.h"
#include "lact/v1/common.pb.h"

namespace lact {

JobOptions FromProto(const v1::JobOptions& options);
void ToProto(const JobOptions& options, v1::JobOptions* out);

}  // namespace lact

#endif  // LACT_PROTO_JOB_OPTIONS_H_
