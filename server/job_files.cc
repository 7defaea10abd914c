#include "server/job_files.h"

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/status_macros.h"
#include "proto/job_options.h"

namespace lact::server {
namespace {

// Fills the spec's context fields from the file, or checks those given.
absl::Status MatchSpec(const TokenFileLayout& file, v1::JobSpec* spec) {
  if (spec->context_tokens() == 0) spec->set_context_tokens(file.rows);
  if (spec->token_width() == 0) spec->set_token_width(static_cast<int32_t>(file.width));
  if (spec->dtype() == v1::DTYPE_UNSPECIFIED) spec->set_dtype(ToProto(file.dtype));
  if (spec->context_tokens() != file.rows || spec->token_width() != file.width) {
    return absl::InvalidArgumentError(
        absl::StrCat("context '", file.path.shown(), "' holds ", file.rows, " x ", file.width,
                     " tokens but the JobSpec says ", spec->context_tokens(), " x ",
                     spec->token_width(), " (leave them 0 to take the file's)"));
  }
  if (spec->dtype() != ToProto(file.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("context '", file.path.shown(), "' is ", v1::DType_Name(ToProto(file.dtype)),
                     " but the JobSpec says ", v1::DType_Name(spec->dtype()),
                     " (leave it unspecified to take the file's)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobFiles> ResolveJobFiles(const std::string& data_root, const std::string& folder,
                                         v1::JobSpec* spec) {
  JobFiles files;
  if (spec->has_context_ref()) {
    LACT_ASSIGN_OR_RETURN(files.context,
                          ResolveDataPath(data_root, spec->context_ref().path(), folder));
    LACT_ASSIGN_OR_RETURN(
        TokenFileLayout layout,
        OpenTokenFile(files.context, spec->context_ref().tensor(), &files.context_id));
    LACT_RETURN_IF_ERROR(MatchSpec(layout, spec));
  }
  if (spec->has_output_ref()) {
    LACT_ASSIGN_OR_RETURN(files.output,
                          ResolveDataPath(data_root, spec->output_ref().path(), folder));
    LACT_ASSIGN_OR_RETURN(std::optional<FileId> existing, ExistingDataFile(files.output));
    if (existing && spec->has_context_ref() && *existing == files.context_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", files.output.shown(), "' is the context file itself (the same file)"));
    }
    if (existing && !spec->output_ref().replace()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "output '", files.output.shown(),
          "' exists; a job never replaces a file unless asked (DataRef.replace, lact submit "
          "--replace)"));
    }
  }
  return files;
}

}  // namespace lact::server
