#include "client/submit_session.h"

#include "proto/metadata_keys.h"

namespace lact {
namespace {

const std::string& JobIdOf(const v1::SubmitResponse& response) {
  return response.has_accepted() ? response.accepted().job_id() : response.progress().job_id();
}

}  // namespace

SubmitSession::CallEnd SubmitSession::Read(grpc::ClientReader<v1::SubmitResponse>* stream,
                                           grpc::ClientContext* ctx) {
  CallEnd end;
  v1::SubmitResponse response;
  while (stream->Read(&response)) {
    end.answered = true;
    end.keeps_jobs = ctx->GetServerInitialMetadata().count(kKeepsJobsKey) > 0;
    if (result_.job_id.empty() && !JobIdOf(response).empty()) {
      result_.job_id = JobIdOf(response);
      if (in_.on_accepted) in_.on_accepted(result_.job_id);
      if (in_.detach) {
        ctx->TryCancel();  // the job runs on without this call
        stream->Finish().IgnoreError();
        end.detached = true;
        return end;
      }
    }
    if (response.has_accepted()) {
      StartAttempt(response.accepted());
    } else if (response.has_progress()) {
      // A call made again names its job first, with no stage.
      if (response.progress().stage() != v1::Progress::STAGE_UNSPECIFIED)
        relay_.FromServer(response.progress());
    } else if (response.has_done()) {
      result_.stats = response.done().stats();
    }
  }
  end.status = stream->Finish();
  return end;
}

// Each attempt's bytes move over transfers of its own.
void SubmitSession::StartAttempt(const v1::JobAccepted& a) {
  result_.shards.assign(a.shards().begin(), a.shards().end());
  if (a.ticket() == ticket_) return;  // announced again by a call made again
  ticket_ = a.ticket();
  if (transfers_ != nullptr) {  // the job runs again on other workers
    transfers_->Cancel();
    transfers_->Join().IgnoreError();
  }
  // A job running again from its spool needs no context rows.
  const bool send_context = in_.context.file() == nullptr && !a.context_spooled();
  transfers_ = std::make_unique<JobTransfers>(
      credentials_, a, send_context ? &in_.context : nullptr, in_.queries, &in_.output, &result_);
  if (send_context) relay_.StartUpload(a.context_tokens());
  transfers_->Start(deadline_, [this](int64_t sent) { relay_.ContextSent(sent); });
}

void SubmitSession::CoordinatorAway() {
  v1::Progress p;
  p.set_stage(v1::Progress::COORDINATOR_AWAY);
  p.set_job_id(result_.job_id);
  p.set_elapsed_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  relay_.FromServer(p);
}

}  // namespace lact
