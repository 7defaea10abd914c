// lact submit's --out file, written while the job runs: the context's
// output rows go to the disk as they arrive (the aligned middle of each
// shard's rows bypassing the page cache, range_writer.h), the query
// outputs and the fused state once the job is done. The client then never
// holds the output in memory, and no write of it is left for after the
// job. The file is made as PATH.partial and takes its name only when
// complete; a job that fails leaves PATH as it was.
#ifndef LACT_CLIENT_CLI_RESULT_FILE_H_
#define LACT_CLIENT_CLI_RESULT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lact_client.h"
#include "common/model_config.h"
#include "common/safetensors_out.h"

namespace lact::cli {

class StreamedResultFile {
 public:
  // For a job of `config` (with the job's options applied) over
  // `context_tokens` tokens, with query sets of `query_tokens` tokens, its
  // fused state in the file if `with_state`. `config_json` goes to the
  // header's lact.config.
  static absl::StatusOr<std::unique_ptr<StreamedResultFile>> Create(
      const std::string& path, const std::string& config_json, const ModelConfig& config,
      int64_t context_tokens, const std::vector<int64_t>& query_tokens, bool with_state);
  StreamedResultFile(const StreamedResultFile&) = delete;
  StreamedResultFile& operator=(const StreamedResultFile&) = delete;
  ~StreamedResultFile();  // removes PATH.partial unless Finish succeeded

  // SubmitOptions.output_rows for the job; valid while this object lives.
  OutputRowsTarget Sink();
  // Writes the rest of `result` (its query outputs and state, which must
  // have the planned shapes) and names the file PATH.
  absl::Status Finish(const JobResult& result);

 private:
  StreamedResultFile(std::string path, std::unique_ptr<SafetensorsOut> out, int64_t row_bytes)
      : path_(std::move(path)), out_(std::move(out)), row_bytes_(row_bytes) {}
  std::string partial() const { return path_ + ".partial"; }

  const std::string path_;
  std::unique_ptr<SafetensorsOut> out_;
  const int64_t row_bytes_;
  std::vector<std::string> state_names_;
  bool finished_ = false;
};

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_RESULT_FILE_H_
