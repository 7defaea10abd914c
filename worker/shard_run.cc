#include "worker/shard_run.h"

#include "absl/strings/str_cat.h"
#include "common/data_files.h"
#include "common/fused_state.h"
#include "common/huge_pages.h"
#include "common/log.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/in_band.h"
#include "proto/job_options.h"

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;

// How long outputs that reached the client are kept, for a client that
// died with the last messages in flight.
constexpr std::chrono::seconds kDeliveredGrace(60);

// The shard's rows of the context file, checked against the job, read
// into huge pages if `huge_pages`.
absl::StatusOr<Tensor> ReadContextRows(const std::string& data_root, const v1::ShardSpec& spec,
                                       int64_t width, bool huge_pages, int64_t* bytes) {
  LACT_ASSIGN_OR_RETURN(const DataPath path, ResolveDataPath(data_root, spec.context_ref().path()));
  LACT_ASSIGN_OR_RETURN(TokenFileLayout file, OpenTokenFile(path, spec.context_ref().tensor()));
  if (file.rows != spec.total_tokens() || file.width != width) {
    return absl::FailedPreconditionError(
        absl::StrCat("context '", path.shown(), "' holds ", file.rows, " x ", file.width,
                     " tokens, not the job's ", spec.total_tokens(), " x ", width,
                     " (changed since the job was accepted?)"));
  }
  Tensor rows =
      huge_pages ? HugePageTensor({spec.tokens(), width}) : Tensor({spec.tokens(), width});
  LACT_RETURN_IF_ERROR(ReadTokenRows(file, spec.begin(), spec.tokens(), rows.ptr()));
  *bytes = spec.tokens() * width * WireBytes(file.dtype);
  return rows;
}

// The shard's rows of the output file, open for them to be written as the
// last block makes them.
absl::StatusOr<std::unique_ptr<OutputFileStream>> OpenOutputRows(const std::string& data_root,
                                                                 const v1::ShardSpec& spec,
                                                                 int64_t width) {
  LACT_ASSIGN_OR_RETURN(const DataPath path, ResolveDataPath(data_root, spec.output_ref().path()));
  return OutputFileStream::Open(path, spec.total_tokens(), width, spec.begin(), spec.tokens());
}

}  // namespace

std::chrono::milliseconds CollectiveTimeout(const v1::ShardSpec& spec) {
  return SpecTimeout(spec.collective_timeout_ms(), kDefaultCollectiveTimeout);
}

// The runner and its group are made while the shard may still wait for
// its turn, so that its compute starts the moment the one before it ends.
absl::StatusOr<v1::ShardDone> ShardRun::Run() {
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<ShardRunner> runner, MakeRunner());
  LACT_RETURN_IF_ERROR(runner->JoinGroup({place_.store, spec_.rendezvous_prefix(), spec_.rank(),
                                          spec_.world_size(), CollectiveTimeout(spec_)}));
  LACT_RETURN_IF_ERROR(AwaitTurn());
  LACT_ASSIGN_OR_RETURN(Tensor shard, ObtainContext());
  if (spec_.has_output_ref()) {
    LACT_ASSIGN_OR_RETURN(output_file_,
                          OpenOutputRows(place_.data_root, spec_, job_.config.output_width()));
  }
  const auto compute_start = Clock::now();
  if (place_.turn != nullptr) done_.set_idle_before_seconds(place_.turn->BeginCompute());
  FusedState state;
  LACT_ASSIGN_OR_RETURN(Tensor output, runner->RunContextShard(std::move(shard), spec_.begin(),
                                                               spec_.total_tokens(), &state));
  if (output.size() != 0) return absl::InternalError("the shard's outputs were not streamed");
  done_.set_compute_seconds(SecondsSince(compute_start));
  if (place_.turn != nullptr) place_.turn->EndTurn();
  context_done_ = true;
  Log(LogLevel::kInfo, "shard_stages",
      {{"job", spec_.job_id()},
       {"rank", spec_.rank()},
       {"tokens", spec_.tokens()},
       {"compute_seconds", done_.compute_seconds()},
       {"stages", profile_.ToJson()}});
  done_.set_allreduce_seconds(runner->overlap().allreduce_seconds);
  done_.set_allreduce_waited_seconds(runner->overlap().waited_seconds);
  ReportSpooled();
  const auto download_start = Clock::now();
  LACT_RETURN_IF_ERROR(Deliver(*runner, std::move(state)));
  done_.set_download_seconds(SecondsSince(download_start));
  if (first_output_) done_.set_output_seconds(SecondsSince(*first_output_));
  done_.set_peak_rss_bytes(PeakRssBytes());
  return done_;
}

// Layer progress is the context's: the query sets run through the same
// hooks afterwards. The context's output rows leave as the last block
// makes them.
absl::StatusOr<std::unique_ptr<ShardRunner>> ShardRun::MakeRunner() {
  RunHooks hooks{[this](int layers, int) {
                   ReportSpooled();
                   if (spec_.rank() == 0 && !context_done_) reports_->LayersDone(layers);
                 },
                 cancelled_, [this](RowSlice rows) { return TakeOutputRows(std::move(rows)); },
                 &profile_};
  return MakeShardRunner(place_.backend, job_.model, job_.config, std::move(hooks));
}

absl::Status ShardRun::AwaitTurn() {
  if (place_.turn == nullptr) return absl::OkStatus();
  LACT_RETURN_IF_ERROR(place_.turn->AwaitTurn());
  // A stream held back under the staging cap was idle through no fault of its own.
  if (transfer_ != nullptr) transfer_->Touch();
  return absl::OkStatus();
}

// The context's rows: read from the file (the read is the upload's time),
// or received in band (the upload's time is the stream's, from its first
// byte to its last).
absl::StatusOr<Tensor> ShardRun::ObtainContext() {
  const int64_t width = job_.config.input_width();
  Tensor shard;
  if (spec_.has_context_ref()) {
    const auto start = Clock::now();
    int64_t bytes = 0;
    LACT_ASSIGN_OR_RETURN(
        shard, ReadContextRows(spec_.context_from_spool() ? place_.spool_dir : place_.data_root,
                               spec_, width, place_.huge_pages, &bytes));
    done_.set_context_bytes(bytes);
    done_.set_upload_seconds(SecondsSince(start));
  }
  if (transfer_ != nullptr && ShardTakesTokensInBand(spec_.has_context_ref(), spec_.rank(),
                                                     spec_.query_tokens_size() > 0)) {
    LACT_RETURN_IF_ERROR(transfer_->AwaitUpload(IdleTimeout()));
    if (!spec_.has_context_ref()) {
      shard = transfer_->receiver().TakeSet(0);
      done_.set_context_bytes(transfer_->context_bytes());
      done_.set_upload_seconds(transfer_->upload_seconds());
      ReportSpooled();
    }
  }
  return shard;
}

// The context's output rows of the shard, from the run's
// thread: to the output file's writer, or published to the stream (and
// kept, so a client that goes away can fetch them).
absl::Status ShardRun::TakeOutputRows(RowSlice rows) {
  if (!first_output_) first_output_ = Clock::now();
  output_bytes_ += rows.size() * static_cast<int64_t>(sizeof(float));
  if (output_file_ != nullptr) return output_file_->Put(std::move(rows));
  Keep({0, spec_.begin() + rows.first, "", rows.tensor, rows.first, rows.n});
  return absl::OkStatus();
}

void ShardRun::Keep(ResultItem item) {
  kept_.outputs.push_back(item);
  if (transfer_ != nullptr) transfer_->Publish(std::move(item));
}

// The rest of the results, after the context's outputs (in the output
// file, or already published): on rank 0 the query sets and the fused
// state. Everything sent in band is retained first, so a client that goes
// away can fetch it: its shard still succeeds, with
// ShardDone.results_delivered false. Returns once all of it is delivered.
absl::Status ShardRun::Deliver(ShardRunner& runner, FusedState state) {
  done_.set_output_bytes(output_bytes_);
  if (output_file_ != nullptr) LACT_RETURN_IF_ERROR(output_file_->Finish());
  if (spec_.rank() == 0) {
    kept_.state = std::make_shared<const FusedState>(std::move(state));
    for (int k = 0; k < spec_.query_tokens_size(); ++k) {
      LACT_ASSIGN_OR_RETURN(Tensor out,
                            runner.RunQuery(transfer_->receiver().TakeSet(k + 1), *kept_.state));
      Keep({k + 1, 0, "", std::make_shared<const Tensor>(std::move(out))});
    }
    if (spec_.return_state()) {
      for (ResultItem& item : StateItems(kept_.state)) transfer_->Publish(std::move(item));
    }
  }
  const std::chrono::seconds ttl(spec_.retain_seconds() > 0 ? spec_.retain_seconds()
                                                            : kDefaultRetain.count());
  if (kept_.state != nullptr || !kept_.outputs.empty()) {
    // Too large for the cap: the job still succeeds; FetchResult and Query
    // will say why nothing was kept.
    place_.results->Put(spec_.job_id(), std::move(kept_), ttl).IgnoreError();
  }
  done_.set_results_delivered(true);
  if (transfer_ == nullptr) return absl::OkStatus();
  return AwaitDelivery();
}

// Waits for the client's stream to take what was published.
absl::Status ShardRun::AwaitDelivery() {
  transfer_->EndPublishing();
  absl::Status sent = transfer_->AwaitDownload(IdleTimeout());
  if (cancelled_()) return sent.ok() ? absl::CancelledError("cancelled by the coordinator") : sent;
  done_.set_results_delivered(sent.ok());
  if (sent.ok()) place_.results->Delivered(spec_.job_id(), kDeliveredGrace);
  return absl::OkStatus();
}

// Tells the coordinator, once, that the shard's context rows are all in
// the spool (the spool's thread writes them while the shard computes;
// checked after the upload and at every layer).
void ShardRun::ReportSpooled() {
  if (spool_reported_ || transfer_ == nullptr || !transfer_->spooled()) return;
  spool_reported_ = true;
  reports_->Spooled();
}

// Longest wait for the client's stream and between its chunks.
std::chrono::milliseconds ShardRun::IdleTimeout() const {
  return SpecTimeout(spec_.upload_idle_timeout_ms(), kDefaultUploadIdleTimeout);
}

}  // namespace lact
