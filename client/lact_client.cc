#include "client/lact_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/job_transfers.h"
#include "client/submit_session.h"
#include "common/model.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/job_options.h"
#include "proto/metadata_keys.h"
#include "proto/status_conversion.h"
#include "proto/tls.h"

namespace lact {
namespace {

// The call's deadline: `timeout` from now, or `otherwise` if it is 0.
template <typename Default>
void SetTimeout(grpc::ClientContext* ctx, std::chrono::milliseconds timeout, Default otherwise) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    (timeout.count() > 0 ? timeout : std::chrono::milliseconds(otherwise)));
}

absl::Status CheckShapes(const ContextInput& context, const std::vector<Tensor>& queries) {
  LACT_RETURN_IF_ERROR(context.Check());
  for (size_t k = 0; k < queries.size(); ++k) {
    // A file's width is the workers' to check; the sets must share one.
    const int64_t width = context.file() != nullptr ? queries[0].dim(1) : context.width();
    if (queries[k].rank() != 2 || queries[k].dim(0) < 1 || queries[k].dim(1) != width) {
      return absl::InvalidArgumentError(absl::StrCat("query set ", k, " has shape ",
                                                     ShapeString(queries[k].shape),
                                                     "; it must be [L_k >= 1, ", width, "]"));
    }
  }
  return absl::OkStatus();
}

// A detached Submit returns once the job is admitted: only a job whose
// bytes all go by reference can be.
absl::Status CheckDetachable(const SubmitOptions& options, const ContextInput& context,
                             const std::vector<Tensor>& queries) {
  if (!options.detach) return absl::OkStatus();
  if (context.file() == nullptr || options.output.file() == nullptr || !queries.empty() ||
      options.return_state) {
    return absl::InvalidArgumentError(
        "detach needs a job whose bytes all go by reference (the context and the output files, "
        "no query sets, return_state off); a job with bytes in band runs on anyway if its client "
        "goes away after the upload, and FetchResult collects its results");
  }
  return absl::OkStatus();
}

// gRPC's retries of the calls that only read: one that fails UNAVAILABLE
// before any answer (its coordinator went away as it was sent) is made
// again after 0.1 s doubling to 1 s, at most 5 times; as the calls wait
// for the channel to be ready, an attempt rides a restart out.
constexpr char kReadsRetryConfig[] = R"json({"methodConfig": [{
  "name": [{"service": "lact.v1.CoordinatorService", "method": "GetJob"},
           {"service": "lact.v1.CoordinatorService", "method": "ListJobs"},
           {"service": "lact.v1.CoordinatorService", "method": "ListModels"},
           {"service": "lact.v1.CoordinatorService", "method": "ListWorkers"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
                  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})json";

// The coordinator's channel reconnects within 2 s of its coming back (a
// restart), not after gRPC's default backoff of up to 2 minutes; its
// reads are retried (kReadsRetryConfig).
grpc::ChannelArguments CoordinatorChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetServiceConfigJSON(kReadsRetryConfig);
  return args;
}

// How long a cluster with no workers may take to show some: a coordinator
// just started (a restart) has them back within a few heartbeats.
constexpr std::chrono::seconds kWorkersRegisterWithin(10);

// How often a Submit call lost to its coordinator going away is made
// again: after 100 ms, doubling to at most 2 s, until the call's deadline.
constexpr std::chrono::milliseconds kFirstBackoff(100), kMostBackoff(2000);

// How long a Submit call that its coordinator never answered (it went
// away as the call was sent) waits for a coordinator to answer again: a
// restart's length. Made again with its request_id, the call follows the
// job if the first admitted it, and admits it otherwise.
constexpr std::chrono::seconds kUnansweredWaits(30);

// Whether a Submit call that ended with `status` and trailing `metadata`
// lost its coordinator (the coordinator's own statuses carry
// kCoordinatorStatusKey), rather than hearing its job's end or running out
// of time.
bool CoordinatorWentAway(const grpc::Status& status,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  return !status.ok() && metadata.count(kCoordinatorStatusKey) == 0 &&
         status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
         status.error_code() != grpc::StatusCode::CANCELLED;
}

// Whether a Submit call that ended as `end` on `ctx` is made again: one
// lost to a coordinator that keeps its jobs is; so is one that a
// coordinator which had been listening as it was made (`reached`) never
// answered (it went away as the call was sent), once `channel` connects
// again. Any other is an error at once.
bool MakeAgain(const SubmitSession::CallEnd& end, const grpc::ClientContext& ctx, bool keeps_jobs,
               bool reached, grpc::Channel& channel,
               std::chrono::system_clock::time_point deadline) {
  const auto now = std::chrono::system_clock::now();
  if (!CoordinatorWentAway(end.status, ctx.GetServerTrailingMetadata()) || now >= deadline) {
    return false;
  }
  if (keeps_jobs) return true;
  return !end.answered && reached &&
         channel.WaitForConnected(std::min(deadline, now + kUnansweredWaits));
}

// The end of a call whose bytes `transfers` (null: none) moved: they are
// cancelled if the call failed, then joined; the call's own status says
// more than a broken transfer.
absl::Status EndWithTransfers(const grpc::Status& call, JobTransfers* transfers) {
  if (!call.ok() && transfers != nullptr) transfers->Cancel();
  const absl::Status moved = transfers != nullptr ? transfers->Join() : absl::OkStatus();
  LACT_RETURN_IF_ERROR(FromGrpcStatus(call));
  return moved;
}

}  // namespace

v1::JobSpec MakeJobSpec(const SubmitOptions& options, const ContextInput& context,
                        const std::vector<Tensor>& queries) {
  v1::JobSpec spec;
  spec.set_model(options.model);
  spec.set_context_tokens(context.tokens());
  spec.set_token_width(static_cast<int32_t>(context.width()));
  for (const Tensor& q : queries) spec.add_query_tokens(q.rank() == 2 ? q.dim(0) : 0);
  // A file's dtype is the file's.
  if (context.file() == nullptr) spec.set_dtype(ToProto(options.dtype));
  spec.set_workers(options.workers);
  for (int64_t n : options.shard_tokens) spec.add_shard_tokens(n);
  ToProto(options.options, spec.mutable_options());
  spec.set_return_state(options.return_state);
  spec.set_retain_seconds(options.retain_seconds);
  if (const FileRef* file = context.file()) {
    spec.mutable_context_ref()->set_path(file->path);
    spec.mutable_context_ref()->set_tensor(file->tensor);
  }
  if (const FileRef* file = options.output.file()) {
    spec.mutable_output_ref()->set_path(file->path);
    spec.mutable_output_ref()->set_replace(file->replace);
  }
  spec.set_cancel_on_disconnect(options.cancel_on_disconnect);
  spec.set_tenant(options.tenant);
  return spec;
}

LactClient::LactClient(const std::string& address, const ClientSecurity& security)
    : address_(address),
      credentials_(ChannelCredentialsFromPem(security.tls_roots)),
      channel_(MakeChannel(address, credentials_, CoordinatorChannelArguments(), security.token)),
      stub_(v1::CoordinatorService::NewStub(channel_)) {}

absl::Status LactClient::WaitUntilReachable(std::chrono::milliseconds timeout) {
  if (channel_->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("no coordinator answers at ", address_, " within ",
                   std::chrono::duration<double>(timeout).count(),
                   " s (is one running there? a cluster with TLS needs --tls-ca)"));
}

absl::StatusOr<JobResult> LactClient::Submit(const SubmitOptions& options,
                                             const ContextInput& context,
                                             const std::vector<Tensor>& queries,
                                             const ProgressFn& progress,
                                             std::function<void(const std::string&)> on_accepted) {
  LACT_RETURN_IF_ERROR(CheckShapes(context, queries));
  LACT_RETURN_IF_ERROR(context.CheckDtype(options.dtype));
  LACT_RETURN_IF_ERROR(CheckDetachable(options, context, queries));
  const auto deadline =
      std::chrono::system_clock::now() +
      (options.timeout.count() > 0
           ? options.timeout
           : std::chrono::duration_cast<std::chrono::milliseconds>(kDefaultJobTimeout));
  v1::SubmitRequest request;
  *request.mutable_spec() = MakeJobSpec(options, context, queries);
  // Names the submission, so a call made again follows the job it admitted.
  if (request.spec().request_id().empty()) request.mutable_spec()->set_request_id(RandomHex(16));
  SubmitSession session(credentials_,
                        {options.output, options.detach, context, queries, progress, on_accepted},
                        deadline);
  bool made_again = false;  // the first call was lost to the coordinator going away
  std::chrono::milliseconds backoff = kFirstBackoff;
  const bool reached = ConnectedBy(deadline);  // a coordinator listened as the call was made
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    ctx.set_wait_for_ready(made_again);  // through a restart's refused connections
    const SubmitSession::CallEnd end = session.Read(stub_->Submit(&ctx, request).get(), &ctx);
    if (end.keeps_jobs) *keeps_jobs_ = true;
    if (end.detached) return session.TakeResult();
    if (!MakeAgain(end, ctx, *keeps_jobs_, reached, *channel_, deadline)) {
      if (end.status.ok() && made_again && session.transfers() != nullptr) break;
      LACT_RETURN_IF_ERROR(EndWithTransfers(end.status, session.transfers()));
      return session.TakeResult();
    }
    session.CoordinatorAway();  // the job and its transfers run on
    made_again = true;
    request.set_follow_only(!session.job_id().empty());  // never a second job
    std::this_thread::sleep_for(backoff);
    backoff = std::min(2 * backoff, kMostBackoff);
  }
  // A job followed through a restart: what its transfers did not bring (an
  // attempt they missed), its workers kept.
  const bool moved = session.transfers()->Join().ok();
  JobResult result = session.TakeResult();
  if (moved) return result;
  LACT_ASSIGN_OR_RETURN(const v1::JobInfo info, GetJob(result.job_id));
  LACT_RETURN_IF_ERROR(FetchKept(info, options.output, &result));
  return result;
}

bool LactClient::ConnectedBy(std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state == GRPC_CHANNEL_IDLE || state == GRPC_CHANNEL_CONNECTING) {
    if (!channel_->WaitForStateChange(state, deadline)) break;
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return state == GRPC_CHANNEL_READY;
}

void LactClient::NoteKeepsJobs(grpc::ClientContext& ctx) {
  if (ctx.GetServerInitialMetadata().count(kKeepsJobsKey) > 0) *keeps_jobs_ = true;
}

absl::Status LactClient::FetchKept(const v1::JobInfo& info, const OutputTarget& output,
                                   JobResult* result) {
  const v1::JobAccepted& a = info.accepted();
  result->shards.assign(a.shards().begin(), a.shards().end());
  std::unique_ptr<JobTransfers> fetch = JobTransfers::Fetch(
      credentials_, a, a.output_in_band() && !info.outputs_retained(), result, &output);
  fetch->Start(std::chrono::system_clock::now() + kDefaultFetchTimeout);
  return fetch->Join();
}

absl::StatusOr<JobResult> LactClient::FetchResult(const std::string& job_id) {
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, GetJob(job_id));
  if (info.status() != v1::JobInfo::SUCCEEDED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", v1::JobInfo::Status_Name(info.status()),
        info.error().empty() ? "" : ": ", info.error(), "; only a succeeded job has results"));
  }
  if (!info.state_retained()) {
    // What the worker itself answers when the coordinator has not heard yet.
    return absl::NotFoundError(absl::StrCat(
        "job ", job_id, "'s results are no longer retained: ",
        info.results_dropped().empty() ? "the job kept none" : info.results_dropped()));
  }
  JobResult result;
  result.job_id = job_id;
  result.shards.assign(info.accepted().shards().begin(), info.accepted().shards().end());
  result.stats = info.stats();
  // Once the context's outputs are gone, the query outputs and state remain.
  std::unique_ptr<JobTransfers> fetch =
      JobTransfers::Fetch(credentials_, info.accepted(),
                          info.accepted().output_in_band() && !info.outputs_retained(), &result);
  fetch->Start(std::chrono::system_clock::now() + kDefaultFetchTimeout);
  LACT_RETURN_IF_ERROR(fetch->Join());
  return result;
}

absl::StatusOr<JobResult> LactClient::Query(const std::string& job_id,
                                            const std::vector<Tensor>& queries, WireType dtype,
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
  SetTimeout(&ctx, timeout, kDefaultQueryTimeout);
  v1::QueryRequest request;
  v1::QuerySpec* spec = request.mutable_spec();
  spec->set_job_id(job_id);
  spec->set_dtype(ToProto(dtype));
  spec->set_token_width(static_cast<int32_t>(queries[0].dim(1)));
  for (const Tensor& q : queries) spec->add_query_tokens(q.dim(0));
  auto stream = stub_->Query(&ctx, request);
  JobResult result;
  result.job_id = job_id;
  std::unique_ptr<JobTransfers> transfer;
  v1::QueryResponse response;
  while (stream->Read(&response)) {
    if (response.has_accepted() && transfer == nullptr) {
      const v1::JobAccepted& a = response.accepted();
      result.shards.assign(a.shards().begin(), a.shards().end());
      // No context rows in, no context outputs back: only the sets'.
      transfer =
          std::make_unique<JobTransfers>(credentials_, a, nullptr, queries, nullptr, &result);
      transfer->Start(ctx.deadline());
    } else if (response.has_done()) {
      result.stats = response.done().stats();
    }
  }
  LACT_RETURN_IF_ERROR(EndWithTransfers(stream->Finish(), transfer.get()));
  if (transfer == nullptr) return absl::InternalError("the server ended the query unaccepted");
  return result;
}

namespace {

// A unary call with a kUnaryTimeout deadline that waits for the channel to be ready
// (riding out a connection still being set up).
template <typename Response, typename Request, typename Call>
absl::StatusOr<Response> Unary(const std::string& address, const Request& request, Call call) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, std::chrono::milliseconds(0), kUnaryTimeout);
  ctx.set_wait_for_ready(true);
  Response response;
  const absl::Status status = FromGrpcStatus(call(&ctx, request, &response));
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat(
        status.message(), ": no answer from ", address, " within ", kUnaryTimeout.count(),
        " s (is a coordinator running there? a cluster with TLS needs --tls-ca)"));
  }
  LACT_RETURN_IF_ERROR(status);
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
      address_, ForJob<v1::GetJobRequest>(job_id),
      [&](auto* c, const auto& q, auto* r) { return stub_->GetJob(c, q, r); });
}

absl::StatusOr<v1::JobInfo> LactClient::WatchJob(
    const std::string& job_id, const std::function<void(const v1::JobInfo&)>& on_change,
    std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout, kDefaultWatchTimeout);
  ctx.set_wait_for_ready(true);
  v1::WatchJobRequest request;
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
  LACT_ASSIGN_OR_RETURN(v1::ListJobsResponse response,
                        Unary<v1::ListJobsResponse>(address_, v1::ListJobsRequest(),
                                                    [&](auto* c, const auto& q, auto* r) {
                                                      return stub_->ListJobs(c, q, r);
                                                    }));
  return std::vector<v1::JobInfo>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::JobInfo> LactClient::CancelJob(const std::string& job_id) {
  return Unary<v1::JobInfo>(
      address_, ForJob<v1::CancelJobRequest>(job_id),
      [&](auto* c, const auto& q, auto* r) { return stub_->CancelJob(c, q, r); });
}

absl::Status LactClient::DeleteJob(const std::string& job_id) {
  return Unary<v1::DeleteJobResponse>(
             address_, ForJob<v1::DeleteJobRequest>(job_id),
             [&](auto* c, const auto& q, auto* r) { return stub_->DeleteJob(c, q, r); })
      .status();
}

absl::StatusOr<std::vector<v1::ModelInfo>> LactClient::ListModels() {
  LACT_ASSIGN_OR_RETURN(v1::ListModelsResponse response,
                        Unary<v1::ListModelsResponse>(address_, v1::ListModelsRequest(),
                                                      [&](auto* c, const auto& q, auto* r) {
                                                        grpc::Status s = stub_->ListModels(c, q, r);
                                                        if (s.ok()) NoteKeepsJobs(*c);
                                                        return s;
                                                      }));
  return std::vector<v1::ModelInfo>(response.models().begin(), response.models().end());
}

absl::StatusOr<std::vector<v1::WorkerInfo>> LactClient::ListWorkers() {
  LACT_ASSIGN_OR_RETURN(v1::ListWorkersResponse response,
                        Unary<v1::ListWorkersResponse>(address_, v1::ListWorkersRequest(),
                                                       [&](auto* c, const auto& q, auto* r) {
                                                         return stub_->ListWorkers(c, q, r);
                                                       }));
  return std::vector<v1::WorkerInfo>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<ModelConfig> LactClient::FindModel(const std::string& model) {
  const std::string key = ModelKey(model);
  // A coordinator that just started (a restart) lists no models until its
  // workers register, within a few heartbeats.
  const auto until = std::chrono::steady_clock::now() + kWorkersRegisterWithin;
  std::vector<std::string> names;
  while (true) {
    LACT_ASSIGN_OR_RETURN(std::vector<v1::ModelInfo> models, ListModels());
    names.clear();
    for (const v1::ModelInfo& m : models) {
      if (m.name() == key) return ParseModelConfig(m.config_json());
      names.push_back(m.name());
    }
    if (!names.empty() || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::NotFoundError(absl::StrCat("the cluster serves no model '", model,
                                          "' (available: ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace lact
