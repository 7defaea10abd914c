// The Query flow: the coordinator checks a query, has the worker that
// keeps the job's fused state expect it under a new ticket, tells the
// client where (a JobAccepted of one shard), and relays the worker's end.
// The query sets and their outputs go between the client and that worker
// over ShardDataService.Transfer, as a Submit's do: none pass through here.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"
#include "server/job_flows.h"
#include "server/job_messages.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

// Runs the query on the worker keeping the state: the client is told where
// once the worker has its header; returns the worker's ShardDone.
absl::StatusOr<v1::ShardDone> RunOnWorker(const ClusterLink& link, const QueryFacts& facts,
                                          QueryCall& call) {
  auto stub = v1::WorkerService::NewStub(WorkerChannel(link, facts.worker));
  grpc::ClientContext ctx;
  ctx.set_deadline(call.capped_deadline());
  v1::RunQueryRequest request;
  *request.mutable_header() = QueryHeader(facts);
  auto worker = stub->RunQuery(&ctx, request);
  QueryCall::EndWatch watch(&call, [&ctx] { ctx.TryCancel(); });
  v1::QueryResponse accepted;
  *accepted.mutable_accepted() = QueryAccepted(facts);
  if (!call.Write(accepted)) ctx.TryCancel();
  v1::RunQueryResponse response;
  std::optional<v1::ShardDone> done;
  while (worker->Read(&response)) {
    if (response.has_done()) done = response.done();
  }
  const grpc::Status s = worker->Finish();
  if (call.ended()) return absl::CancelledError("the client went away");
  LACT_RETURN_IF_ERROR(FromGrpcStatus(s, absl::StrCat("query on worker ", facts.worker)));
  if (!done.has_value()) {
    return absl::InternalError(
        absl::StrCat("worker ", facts.worker, " ended the query without its ShardDone"));
  }
  return *done;
}

// The query's facts, once the caller may query the job and the spec fits it.
absl::StatusOr<QueryFacts> CheckQuery(const CoordinatorContext& c, const Caller& caller,
                                      const v1::QuerySpec& spec) {
  LACT_RETURN_IF_ERROR(c.jobs->CheckOwner(spec.job_id(), caller));
  LACT_ASSIGN_OR_RETURN(std::shared_ptr<const RetainedState> kept, c.jobs->State(spec.job_id()));
  LACT_ASSIGN_OR_RETURN(ModelConfig config, c.registry->FindModel(kept->model));
  if (spec.token_width() != config.input_width()) {
    return absl::InvalidArgumentError(absl::StrCat("token_width ", spec.token_width(),
                                                   " does not match the job's model, which takes ",
                                                   config.input_width(), " features per token"));
  }
  LACT_RETURN_IF_ERROR(FromProto(spec.dtype()).status());
  if (spec.query_tokens().empty()) return absl::InvalidArgumentError("no query sets");
  LACT_RETURN_IF_ERROR(CheckQuerySets(spec.query_tokens(), c.options.limits));
  return QueryFacts{&spec, kept->worker, NewTicket(), config.output_width(),
                    c.options.upload_idle_timeout};
}

absl::Status QueryFlow(const CoordinatorContext& c, const Caller& caller,
                       const v1::QueryRequest& request, QueryCall& call) {
  const auto start = std::chrono::steady_clock::now();
  if (!request.has_spec()) return absl::InvalidArgumentError(kNoQuerySpec);
  const v1::QuerySpec& spec = request.spec();
  absl::StatusOr<QueryFacts> facts = CheckQuery(c, caller, spec);
  if (!facts.ok()) return facts.status();
  absl::StatusOr<v1::ShardDone> worker_done = RunOnWorker(c.cluster, *facts, call);
  if (worker_done.status().code() == absl::StatusCode::kNotFound) {
    // The worker no longer holds the state (dropped before its heartbeat
    // said so, or lost with a restart): from now on the job says so, and
    // this query is refused as one after the heartbeat would be.
    c.jobs->ResultsDropped(spec.job_id(), true, std::string(worker_done.status().message()));
    return c.jobs->State(spec.job_id()).status();
  }
  if (!worker_done.ok()) return worker_done.status();
  v1::QueryResponse done;
  done.mutable_done()->set_job_id(spec.job_id());
  *done.mutable_done()->mutable_stats() = QueryStats(*worker_done, SecondsSince(start));
  call.Write(done);
  return absl::OkStatus();
}

}  // namespace

absl::Status HandleQuery(const CoordinatorContext& c, const Caller& caller,
                         const v1::QueryRequest& request, QueryCall& call) {
  const absl::Status status = [&] {
    if (c.queries == nullptr) return QueryFlow(c, caller, request, call);
    if (absl::Status s = c.queries->Enter(caller.tenant); !s.ok()) return s;
    absl::Status ended = QueryFlow(c, caller, request, call);
    c.queries->Leave(caller.tenant);
    return ended;
  }();
  ReportCallEnd(c, "Query", caller, request.spec().job_id(), status);
  return status;
}

}  // namespace lact::server
