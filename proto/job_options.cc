#include "proto/job_options.h"

namespace lact {

JobOptions FromProto(const v1::JobOptions& options) {
  JobOptions o;
  if (options.has_muon_steps()) o.muon_steps = options.muon_steps();
  if (options.has_chunk_tokens()) o.chunk_tokens = options.chunk_tokens();
  return o;
}

void ToProto(const JobOptions& options, v1::JobOptions* out) {
  if (options.muon_steps) out->set_muon_steps(*options.muon_steps);
  if (options.chunk_tokens) out->set_chunk_tokens(*options.chunk_tokens);
}

absl::StatusOr<WireType> FromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::F32:
      return WireType::kF32;
    case v1::BF16:
      return WireType::kBF16;
    case v1::F16:
      return WireType::kF16;
    default:
      return absl::InvalidArgumentError("dtype must be F32, BF16 or F16");
  }
}

v1::DType ToProto(WireType type) {
  switch (type) {
    case WireType::kF32:
      return v1::F32;
    case WireType::kBF16:
      return v1::BF16;
    case WireType::kF16:
      return v1::F16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

}  // namespace lact
