#include "client/cli/result_file.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fused_state.h"
#include "common/status_macros.h"

namespace lact::cli {

absl::StatusOr<std::unique_ptr<StreamedResultFile>> StreamedResultFile::Create(
    const std::string& path, const std::string& config_json, const ModelConfig& config,
    int64_t context_tokens, const std::vector<int64_t>& query_tokens, bool with_state) {
  const int64_t width = config.output_width();
  // The output first: its rows start on an aligned block.
  std::vector<SafetensorsOut::Planned> planned{{"output", {context_tokens, width}}};
  for (size_t k = 0; k < query_tokens.size(); ++k)
    planned.push_back({absl::StrCat("query_", k), {query_tokens[k], width}});
  std::vector<std::string> state_names;
  if (with_state) {
    const FusedState zero = ZeroFusedState(config);
    for (const auto& [name, t] : FusedStateTensors(zero)) {
      planned.push_back({name, t->shape});
      state_names.push_back(name);
    }
  }
  LACT_ASSIGN_OR_RETURN(
      std::unique_ptr<SafetensorsOut> out,
      SafetensorsOut::Create(path + ".partial", {{"lact.config", config_json}}, planned));
  std::unique_ptr<StreamedResultFile> file(
      new StreamedResultFile(path, std::move(out), width * int64_t{4}));
  file->state_names_ = std::move(state_names);
  return file;
}

StreamedResultFile::~StreamedResultFile() {
  if (!finished_) {
    out_.reset();
    std::remove(partial().c_str());
  }
}

OutputRowsTarget StreamedResultFile::Sink() {
  return [this](int64_t begin, int64_t n) {
    return out_->Rows("output", static_cast<uint64_t>(begin * row_bytes_),
                      static_cast<uint64_t>(n * row_bytes_));
  };
}

absl::Status StreamedResultFile::Finish(const JobResult& result) {
  for (size_t k = 0; k < result.queries.size(); ++k)
    LACT_RETURN_IF_ERROR(out_->Write(absl::StrCat("query_", k), result.queries[k]));
  for (const std::string& name : state_names_) {
    const auto it = result.state.find(name);
    if (it == result.state.end()) {
      return absl::DataLossError(
          absl::StrCat("the workers returned no state tensor '", name, "' for ", path_));
    }
    LACT_RETURN_IF_ERROR(out_->Write(name, it->second));
  }
  LACT_RETURN_IF_ERROR(out_->Finish());
  if (std::rename(partial().c_str(), path_.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat("naming '", partial(), "' '", path_, "' failed"));
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace lact::cli
