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

}  // namespace lact
