#include "worker/query_run.h"

#include "absl/strings/str_cat.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/job_options.h"
#include "worker/shard_run.h"

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::shared_ptr<ShardTransfer>> MakeQueryTransfer(
    const v1::WorkerQueryHeader& header, bool huge_pages) {
  if (header.query_tokens().empty())
    return absl::InvalidArgumentError("WorkerQueryHeader has no query sets");
  for (int64_t tokens : header.query_tokens()) {
    if (tokens < 1) return absl::InvalidArgumentError("every query set needs >= 1 token");
  }
  if (header.token_width() < 1)
    return absl::InvalidArgumentError("WorkerQueryHeader.token_width must be >= 1");
  if (header.ticket().empty())
    return absl::InvalidArgumentError("WorkerQueryHeader.ticket must be set");
  LACT_ASSIGN_OR_RETURN(WireType dtype, FromProto(header.dtype()));
  std::vector<int64_t> lengths = {0};
  lengths.insert(lengths.end(), header.query_tokens().begin(), header.query_tokens().end());
  return std::make_shared<ShardTransfer>(
      header.ticket(),
      TokenReceiver(std::move(lengths), header.token_width(), dtype, 0, huge_pages));
}

absl::StatusOr<v1::ShardDone> QueryRun::Run() {
  const Clock::time_point start = Clock::now();
  LACT_ASSIGN_OR_RETURN(RetainedResult kept, place_.results->Get(header_.job_id()));
  if (kept.state == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("this worker ran rank ", kept.rank,
                                                      " of job '", header_.job_id(),
                                                      "'; its fused state is on rank 0's worker"));
  }
  LACT_ASSIGN_OR_RETURN(JobModel job, ResolveJobModel(*place_.models, kept.model, kept.options));
  if (job.config.input_width() != header_.token_width()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WorkerQueryHeader.token_width ", header_.token_width(), " but model '",
                     kept.model, "' takes ", job.config.input_width()));
  }
  v1::ShardDone done;
  LACT_RETURN_IF_ERROR(transfer_->AwaitUpload(IdleTimeout()));
  done.set_upload_seconds(SecondsSince(start));
  done.set_context_bytes(transfer_->context_bytes());
  const Clock::time_point compute = Clock::now();
  LACT_ASSIGN_OR_RETURN(
      std::unique_ptr<ShardRunner> runner,
      MakeShardRunner(place_.backend, job.model, job.config, {nullptr, cancelled_}));
  int64_t output_bytes = 0;
  for (int k = 0; k < header_.query_tokens_size(); ++k) {
    LACT_ASSIGN_OR_RETURN(Tensor out,
                          runner->RunQuery(transfer_->receiver().TakeSet(k + 1), *kept.state));
    output_bytes += out.size() * static_cast<int64_t>(sizeof(float));
    transfer_->Publish({k + 1, 0, "", std::make_shared<const Tensor>(std::move(out))});
  }
  done.set_compute_seconds(SecondsSince(compute));
  done.set_output_bytes(output_bytes);
  const Clock::time_point download = Clock::now();
  transfer_->EndPublishing();
  LACT_RETURN_IF_ERROR(transfer_->AwaitDownload(IdleTimeout()));
  if (cancelled_()) return absl::CancelledError("cancelled by the coordinator");
  done.set_download_seconds(SecondsSince(download));
  done.set_results_delivered(true);
  done.set_peak_rss_bytes(PeakRssBytes());
  return done;
}

std::chrono::milliseconds QueryRun::IdleTimeout() const {
  return std::chrono::milliseconds(header_.upload_idle_timeout_ms() > 0
                                       ? header_.upload_idle_timeout_ms()
                                       : kDefaultUploadIdleTimeout.count());
}

}  // namespace lact
