#include "client/lact_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/shard_transfers.h"
#include "common/model.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

void SetTimeout(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

// Writes the chunks of `sets` (set index = position + first_set) in order.
template <typename Request, typename Stream>
bool WriteSets(Stream* stream, const std::vector<const Tensor*>& sets, int first_set,
               WireType dtype) {
  for (size_t s = 0; s < sets.size(); ++s) {
    const Tensor& t = *sets[s];
    const int64_t width = t.dim(1);
    const bool sent =
        SendInMessages(t.dim(0), WireBytes(dtype) * width, [&](int64_t row, int64_t n) {
          Request r;
          r.mutable_chunk()->set_set(static_cast<int>(s) + first_set);
          r.mutable_chunk()->set_offset(row);
          r.mutable_chunk()->set_data(EncodeFloats(t.ptr() + row * width, n * width, dtype));
          return stream->Write(r);
        });
    if (!sent) return false;
  }
  stream->WritesDone();
  return true;
}

// Copies an output chunk into its tensor; out-of-range chunks are errors.
absl::Status PlaceOutput(const v1::OutputChunk& chunk, std::vector<Tensor*>& sets) {
  if (chunk.set() < 0 || chunk.set() >= static_cast<int>(sets.size()) ||
      sets[chunk.set()] == nullptr) {
    return absl::InternalError(absl::StrCat("server sent output for unknown set ", chunk.set()));
  }
  Tensor& t = *sets[chunk.set()];
  const int64_t width = t.dim(1), values = static_cast<int64_t>(chunk.data().size()) / 4;
  if (chunk.offset() < 0 || chunk.offset() * width + values > t.size()) {
    return absl::InternalError(absl::StrCat("server sent output rows outside set ", chunk.set()));
  }
  std::memcpy(t.ptr() + chunk.offset() * width, chunk.data().data(), values * 4);
  return absl::OkStatus();
}

absl::Status CheckShapes(const SubmitOptions& options, const Tensor& context,
                         const std::vector<Tensor>& queries) {
  if (!options.context_ref.empty()) {
    if (context.size() != 0)
      return absl::InvalidArgumentError("give a context tensor or context_ref, not both");
  } else if (context.rank() != 2 || context.dim(0) < 1 || context.dim(1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("context must be [L >= 1, width >= 1], not ", ShapeString(context.shape)));
  }
  for (size_t k = 0; k < queries.size(); ++k) {
    const int64_t width = options.context_ref.empty() ? context.dim(1) : queries[0].dim(1);
    if (queries[k].rank() != 2 || queries[k].dim(0) < 1 || queries[k].dim(1) != width) {
      return absl::InvalidArgumentError(absl::StrCat("query set ", k, " has shape ",
                                                     ShapeString(queries[k].shape),
                                                     "; it must be [L_k >= 1, ", width, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

v1::JobSpec MakeJobSpec(const SubmitOptions& options, int64_t tokens, int64_t width,
                        const std::vector<Tensor>& queries) {
  v1::JobSpec spec;
  spec.set_model(options.model);
  spec.set_context_tokens(tokens);
  spec.set_token_width(static_cast<int32_t>(width));
  for (const Tensor& q : queries) spec.add_query_tokens(q.rank() == 2 ? q.dim(0) : 0);
  if (options.context_ref.empty()) spec.set_dtype(ToProto(options.dtype));
  spec.set_workers(options.workers);
  for (int64_t n : options.shard_tokens) spec.add_shard_tokens(n);
  ToProto(options.options, spec.mutable_options());
  spec.set_return_state(options.return_state);
  spec.set_retain_seconds(options.retain_seconds);
  if (!options.context_ref.empty()) {
    spec.mutable_context_ref()->set_path(options.context_ref);
    spec.mutable_context_ref()->set_tensor(options.context_ref_tensor);
  }
  if (!options.output_ref.empty()) spec.mutable_output_ref()->set_path(options.output_ref);
  spec.set_cancel_on_disconnect(options.cancel_on_disconnect);
  spec.set_tenant(options.tenant);
  return spec;
}

LactClient::LactClient(const std::string& address)
    : stub_(v1::Coordinator::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

absl::StatusOr<JobResult> LactClient::Submit(const SubmitOptions& options, const Tensor& context,
                                             const std::vector<Tensor>& queries,
                                             const ProgressFn& progress,
                                             std::function<void(const std::string&)> on_accepted) {
  LACT_RETURN_IF_ERROR(CheckShapes(options, context, queries));
  const bool by_ref = !options.context_ref.empty();
  if (options.detach &&
      (!by_ref || options.output_ref.empty() || !queries.empty() || options.return_state)) {
    return absl::InvalidArgumentError(
        "detach needs a job whose bytes all go by reference (context_ref and output_ref, no query "
        "sets, "
        "return_state off); a job with bytes in band runs on anyway if its client goes away after "
        "the "
        "upload, and FetchResult collects its results");
  }
  grpc::ClientContext ctx;
  SetTimeout(&ctx, options.timeout);
  auto stream = stub_->Submit(&ctx);
  v1::SubmitRequest first;
  *first.mutable_spec() =
      MakeJobSpec(options, by_ref ? 0 : context.dim(0), by_ref ? 0 : context.dim(1), queries);
  stream->Write(first);
  stream->WritesDone();
  JobResult result;
  std::unique_ptr<ShardTransfers> transfers;
  std::mutex progress_mu;  // progress comes from this thread and the upload reporter
  std::atomic<bool> uploading{false};
  std::thread reporter;
  v1::SubmitResponse response;
  while (stream->Read(&response)) {
    const std::string& id =
        response.has_accepted() ? response.accepted().job_id() : response.progress().job_id();
    if (result.job_id.empty() && !id.empty()) {
      result.job_id = id;
      if (on_accepted) on_accepted(id);
      if (options.detach) {
        ctx.TryCancel();  // the job runs on without this call
        stream->Finish().IgnoreError();
        return result;
      }
    }
    if (response.has_accepted()) {
      const v1::JobAccepted& a = response.accepted();
      result.shards.assign(a.shards().begin(), a.shards().end());
      transfers = std::make_unique<ShardTransfers>(a, by_ref ? nullptr : &context, queries,
                                                   options.output_ref.empty(), &result);
      transfers->Start();
      if (progress && !by_ref) {
        uploading = true;
        reporter = std::thread([&, total = a.context_tokens(),
                                start = std::chrono::steady_clock::now()] {
          while (uploading) {
            v1::Progress p;
            p.set_stage(v1::Progress::UPLOAD);
            p.set_tokens_done(transfers->tokens_sent());
            p.set_tokens_total(total);
            p.set_elapsed_seconds(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            {
              std::lock_guard<std::mutex> lock(progress_mu);
              progress(p);
            }
            if (p.tokens_done() >= total) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
          }
        });
      }
    } else if (response.has_progress()) {
      uploading = false;
      std::lock_guard<std::mutex> lock(progress_mu);
      if (progress) progress(response.progress());
    } else if (response.has_done()) {
      result.stats = response.done().stats();
    }
  }
  uploading = false;
  grpc::Status status = stream->Finish();
  if (!status.ok() && transfers != nullptr) transfers->Cancel();
  absl::Status moved = transfers != nullptr ? transfers->Join() : absl::OkStatus();
  if (reporter.joinable()) reporter.join();
  LACT_RETURN_IF_ERROR(
      FromGrpcStatus(status));  // the job's own status says more than a broken transfer
  LACT_RETURN_IF_ERROR(moved);
  return result;
}

absl::StatusOr<JobResult> LactClient::FetchResult(const std::string& job_id) {
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, GetJob(job_id));
  if (info.status() != v1::JobInfo::SUCCEEDED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", v1::JobInfo::Status_Name(info.status()),
        info.error().empty() ? "" : ": ", info.error(), "; only a succeeded job has results"));
  }
  if (!info.state_retained()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, "'s results are no longer retained"));
  }
  JobResult result;
  result.job_id = job_id;
  result.shards.assign(info.accepted().shards().begin(), info.accepted().shards().end());
  result.stats = info.stats();
  std::unique_ptr<ShardTransfers> fetch = ShardTransfers::Fetch(info.accepted(), &result);
  fetch->Start();
  LACT_RETURN_IF_ERROR(fetch->Join());
  return result;
}

absl::StatusOr<std::vector<Tensor>> LactClient::Query(const std::string& job_id,
                                                      const std::vector<Tensor>& queries,
                                                      WireType dtype,
                                                      std::chrono::milliseconds timeout) {
  if (queries.empty()) return absl::InvalidArgumentError("no query sets");
  for (size_t k = 0; k < queries.size(); ++k) {
    if (queries[k].rank() != 2 || queries[k].dim(0) < 1 || queries[k].dim(1) != queries[0].dim(1) ||
        queries[k].dim(1) < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("query set ", k, " has shape ", ShapeString(queries[k].shape),
                       "; all must be [L_k >= 1, width >= 1] of one width"));
    }
  }
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  auto stream = stub_->Query(&ctx);
  v1::QueryRequest first;
  first.mutable_spec()->set_job_id(job_id);
  first.mutable_spec()->set_dtype(ToProto(dtype));
  first.mutable_spec()->set_token_width(queries.empty() ? 0
                                                        : static_cast<int32_t>(queries[0].dim(1)));
  std::vector<const Tensor*> sets;
  for (const Tensor& q : queries) {
    first.mutable_spec()->add_query_tokens(q.dim(0));
    sets.push_back(&q);
  }
  std::thread writer([&] {
    if (stream->Write(first)) WriteSets<v1::QueryRequest>(stream.get(), sets, 1, dtype);
  });
  std::vector<Tensor> out;
  std::vector<Tensor*> targets = {nullptr};
  absl::Status failure;
  v1::SubmitResponse response;
  while (failure.ok() && stream->Read(&response)) {
    if (!response.has_output()) continue;
    if (out.empty()) {
      const int64_t width = response.output().tokens() > 0
                                ? static_cast<int64_t>(response.output().data().size()) / 4 /
                                      response.output().tokens()
                                : 1;
      for (const Tensor& q : queries) out.emplace_back(std::vector<int64_t>{q.dim(0), width});
      for (Tensor& t : out) targets.push_back(&t);
    }
    failure = PlaceOutput(response.output(), targets);
  }
  if (!failure.ok()) ctx.TryCancel();
  writer.join();
  grpc::Status status = stream->Finish();
  LACT_RETURN_IF_ERROR(failure);
  LACT_RETURN_IF_ERROR(FromGrpcStatus(status));
  return out;
}

namespace {

// A unary call with a 30 s deadline that waits for the channel to be ready
// (riding out a connection still being set up).
template <typename Response, typename Request, typename Call>
absl::StatusOr<Response> Unary(const Request& request, Call call) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, std::chrono::seconds(30));
  ctx.set_wait_for_ready(true);
  Response response;
  LACT_RETURN_IF_ERROR(FromGrpcStatus(call(&ctx, request, &response)));
  return response;
}

template <typename Request>
Request ForJob(const std::string& job_id) {
  Request r;
  r.set_job_id(job_id);
  return r;
}

}  // namespace

absl::StatusOr<v1::JobInfo> LactClient::GetJob(const std::string& job_id) {
  return Unary<v1::JobInfo>(
      ForJob<v1::GetJobRequest>(job_id),
      [&](auto* c, const auto& q, auto* r) { return stub_->GetJob(c, q, r); });
}

absl::StatusOr<v1::JobInfo> LactClient::WatchJob(
    const std::string& job_id, const std::function<void(const v1::JobInfo&)>& on_change) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<v1::JobInfo>> reader = stub_->WatchJob(&ctx, request);
  v1::JobInfo info, last;
  bool any = false;
  while (reader->Read(&info)) {
    if (on_change) on_change(info);
    last = info;
    any = true;
  }
  LACT_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  if (!any)
    return absl::UnavailableError(absl::StrCat("WatchJob sent nothing for job '", job_id, "'"));
  return last;
}

absl::StatusOr<std::vector<v1::JobInfo>> LactClient::ListJobs() {
  LACT_ASSIGN_OR_RETURN(
      v1::ListJobsResponse response,
      Unary<v1::ListJobsResponse>(v1::ListJobsRequest(), [&](auto* c, const auto& q, auto* r) {
        return stub_->ListJobs(c, q, r);
      }));
  return std::vector<v1::JobInfo>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::JobInfo> LactClient::CancelJob(const std::string& job_id) {
  return Unary<v1::JobInfo>(
      ForJob<v1::CancelJobRequest>(job_id),
      [&](auto* c, const auto& q, auto* r) { return stub_->CancelJob(c, q, r); });
}

absl::Status LactClient::DeleteJob(const std::string& job_id) {
  return Unary<v1::DeleteJobResponse>(
             ForJob<v1::DeleteJobRequest>(job_id),
             [&](auto* c, const auto& q, auto* r) { return stub_->DeleteJob(c, q, r); })
      .status();
}

absl::StatusOr<std::vector<v1::ModelInfo>> LactClient::ListModels() {
  LACT_ASSIGN_OR_RETURN(
      v1::ListModelsResponse response,
      Unary<v1::ListModelsResponse>(v1::ListModelsRequest(), [&](auto* c, const auto& q, auto* r) {
        return stub_->ListModels(c, q, r);
      }));
  return std::vector<v1::ModelInfo>(response.models().begin(), response.models().end());
}

absl::StatusOr<ModelConfig> LactClient::FindModel(const std::string& model) {
  LACT_ASSIGN_OR_RETURN(std::vector<v1::ModelInfo> models, ListModels());
  const std::string key = ModelKey(model);
  std::vector<std::string> names;
  for (const v1::ModelInfo& m : models) {
    if (m.name() == key) return ParseModelConfig(m.config_json());
    names.push_back(m.name());
  }
  return absl::NotFoundError(absl::StrCat("the cluster serves no model '", model,
                                          "' (available: ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace lact
