// The files of a job by reference (JobSpec.context_ref, output_ref),
// resolved inside the coordinator's data root (or a tenant's folder of it)
// before any worker is leased: the context's header is read (never its
// rows) and fills in or checks the spec's context_tokens, token_width and
// dtype; an output that exists is refused unless the spec lets it be
// replaced, and refused always when it is the context under another name.
// Each file is opened again where it is used (data_path.h). Errors name
// the file and what is allowed (data_files.h).
#ifndef LACT_SERVER_JOB_FILES_H_
#define LACT_SERVER_JOB_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/data_path.h"
#include "lact/v1/coordinator.pb.h"

namespace lact::server {

struct JobFiles {
  DataPath context;  // empty: in band
  FileId context_id;
  DataPath output;  // empty: in band
};

// `folder`: the tenant's folder inside the root, or empty for the whole root.
absl::StatusOr<JobFiles> ResolveJobFiles(const std::string& data_root, const std::string& folder,
                                         v1::JobSpec* spec);

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_FILES_H_
