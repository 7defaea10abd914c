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
  return SpecTimeout(header_.upload_idle_timeout_ms(), kDefaultUploadIdleTimeout);
}

}  // namespace lact
