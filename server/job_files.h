// The files of a job by reference (JobSpec.context_ref, output_ref),
// resolved inside the coordinator's data root before any worker is leased:
// the context's header is read (never its rows) and fills in or checks the
// spec's context_tokens, token_width and dtype. Errors name the file and
// what is allowed (data_files.h).
#ifndef LACT_SERVER_JOB_FILES_H_
#define LACT_SERVER_JOB_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "lact/v1/coordinator.pb.h"

namespace lact::server {

struct JobFiles {
  std::string context;  // resolved path, or empty (in band)
  std::string output;   // resolved path, or empty (in band)
};

absl::StatusOr<JobFiles> ResolveJobFiles(const std::string& data_root, v1::JobSpec* spec);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_FILES_H_
