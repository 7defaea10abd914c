// The Query flow: query sets passed on to the worker that keeps the job's
// fused state, their outputs passed back (the one flow that relays bytes:
// JobStats.coordinator_payload_bytes counts them).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"
#include "server/job_flows.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

// Passes the client's query chunks to the worker keeping the state, and
// its outputs back; counts the bytes relayed.
absl::Status RelayQuery(const ClusterLink& link, const RetainedState& kept,
                        const v1::QuerySpec& spec, int64_t output_width,
                        std::chrono::milliseconds idle, QueryCall& call, int64_t* payload) {
  auto stub = v1::Worker::NewStub(WorkerChannel(link, kept.worker));
  grpc::ClientContext ctx;
  ctx.set_deadline(call.capped_deadline());
  auto worker = stub->RunQuery(&ctx);
  QueryCall::EndWatch watch(&call, [&ctx] { ctx.TryCancel(); });
  v1::WorkerQueryRequest header;
  header.mutable_header()->set_job_id(spec.job_id());
  *header.mutable_header()->mutable_query_tokens() = spec.query_tokens();
  header.mutable_header()->set_dtype(spec.dtype());
  bool ok = worker->Write(header);
  v1::QueryRequest request;
  absl::Status bad;
  const grpc::Status idle_status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                 absl::StrCat("no query chunk within ", idle.count(),
                                              " ms (the coordinator's --upload-idle-timeout-ms)"));
  while (ok && call.ReadWithin(&request, idle, idle_status)) {
    if (!request.has_chunk()) {
      bad = absl::InvalidArgumentError("after the QuerySpec, Query takes only chunks");
      ctx.TryCancel();
      break;
    }
    *payload += static_cast<int64_t>(request.chunk().data().size());
    v1::WorkerQueryRequest r;
    *r.mutable_chunk() = std::move(*request.mutable_chunk());
    ok = worker->Write(r);
  }
  worker->WritesDone();
  v1::ShardResponse response;
  while (bad.ok() && worker->Read(&response)) {
    if (!response.has_output()) continue;
    v1::QueryResponse out;
    v1::OutputChunk* chunk = out.mutable_output();
    chunk->set_set(response.output().set());
    chunk->set_offset(response.output().offset());
    chunk->set_tokens(static_cast<int64_t>(response.output().data().size()) / (4 * output_width));
    *payload += static_cast<int64_t>(response.output().data().size());
    chunk->set_data(std::move(*response.mutable_output()->mutable_data()));
    if (!call.Write(out)) {
      ctx.TryCancel();
      bad = absl::CancelledError("the client went away");
    }
  }
  grpc::Status s = worker->Finish();
  LACT_RETURN_IF_ERROR(bad);
  if (call.ended()) return absl::CancelledError("the client went away");
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("query on worker ", kept.worker, ": ", s.error_message()));
  }
  return absl::OkStatus();
}

grpc::Status QueryFlow(const Coordinator& c, const Caller& caller, const v1::QueryRequest& first,
                       QueryCall& call) {
  if (!first.has_spec()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kNoQuerySpec);
  const v1::QuerySpec spec = first.spec();
  if (absl::Status s = c.jobs->CheckOwner(spec.job_id(), caller); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<std::shared_ptr<const RetainedState>> kept = c.jobs->State(spec.job_id());
  if (!kept.ok()) return ToGrpcStatus(kept.status());
  absl::StatusOr<ModelConfig> config = c.registry->FindModel((*kept)->model);
  if (!config.ok()) return ToGrpcStatus(config.status());
  if (spec.token_width() != config->input_width()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("token_width ", spec.token_width(),
                                     " does not match the job's model, which takes ",
                                     config->input_width(), " features per token"));
  }
  absl::StatusOr<WireType> dtype = FromProto(spec.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  if (spec.query_tokens().empty())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no query sets");
  absl::Status sets_ok = CheckQuerySets(spec.query_tokens(), c.options.limits);
  if (!sets_ok.ok()) return ToGrpcStatus(sets_ok);
  int64_t payload = 0;
  absl::Status s = RelayQuery(c.cluster, **kept, spec, config->output_width(),
                              c.options.upload_idle_timeout, call, &payload);
  if (!s.ok()) return ToGrpcStatus(s);
  v1::QueryResponse done;
  done.mutable_done()->set_job_id(spec.job_id());
  done.mutable_done()->mutable_stats()->set_coordinator_payload_bytes(payload);
  call.Write(done);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status RunQuery(const Coordinator& c, const Caller& caller, const v1::QueryRequest& first,
                      QueryCall& call) {
  const grpc::Status status = QueryFlow(c, caller, first, call);
  ReportCallEnd(c, "Query", caller, first.has_spec() ? first.spec().job_id() : "", status);
  return status;
}

}  // namespace lact::server
