#include "client/lact_client.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/model.h"
#include "common/status_macros.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"

namespace lact {
namespace {

constexpr int kMaxMessageBytes = 64 << 20;
constexpr int64_t kChunkBytes = 4 << 20;

void SetTimeout(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

v1::DType ToProto(WireType t) {
  switch (t) {
    case WireType::kF32: return v1::F32;
    case WireType::kBF16: return v1::BF16;
    case WireType::kF16: return v1::F16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

// Writes the chunks of `sets` (set index = position + first_set) in order.
template <typename Request, typename Stream>
bool WriteSets(Stream* stream, const std::vector<const Tensor*>& sets, int first_set, WireType dtype) {
  for (size_t s = 0; s < sets.size(); ++s) {
    const Tensor& t = *sets[s];
    const int64_t width = t.dim(1), per_chunk = std::max<int64_t>(1, kChunkBytes / (WireBytes(dtype) * width));
    for (int64_t row = 0; row < t.dim(0); row += per_chunk) {
      const int64_t n = std::min(per_chunk, t.dim(0) - row);
      Request r;
      r.mutable_chunk()->set_set(static_cast<int>(s) + first_set);
      r.mutable_chunk()->set_offset(row);
      r.mutable_chunk()->set_data(EncodeTokens(t.ptr() + row * width, n * width, dtype));
      if (!stream->Write(r)) return false;
    }
  }
  stream->WritesDone();
  return true;
}

// Copies an output chunk into its tensor; out-of-range chunks are errors.
absl::Status PlaceOutput(const v1::OutputChunk& chunk, std::vector<Tensor*>& sets) {
  if (chunk.set() < 0 || chunk.set() >= static_cast<int>(sets.size()) || sets[chunk.set()] == nullptr) {
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

}  // namespace

LactClient::LactClient(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  stub_ = v1::Coordinator::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

absl::StatusOr<JobResult> LactClient::Submit(const SubmitOptions& options, const Tensor& context,
                                             const std::vector<Tensor>& queries, const ProgressFn& progress,
                                             std::function<void(const std::string&)> on_accepted) {
  if (context.rank() != 2 || context.dim(0) < 1 || context.dim(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("context must be [L >= 1, width >= 1], not ",
                                                   ShapeString(context.shape)));
  }
  for (size_t k = 0; k < queries.size(); ++k) {
    if (queries[k].rank() != 2 || queries[k].dim(1) != context.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat("query set ", k, " has shape ", ShapeString(queries[k].shape),
                                                     "; it must be [L_k, ", context.dim(1), "]"));
    }
  }
  grpc::ClientContext ctx;
  SetTimeout(&ctx, options.timeout);
  auto stream = stub_->Submit(&ctx);
  v1::SubmitRequest first;
  v1::JobSpec* spec = first.mutable_spec();
  spec->set_model(options.model);
  spec->set_context_tokens(context.dim(0));
  spec->set_token_width(static_cast<int32_t>(context.dim(1)));
  for (const Tensor& q : queries) spec->add_query_tokens(q.rank() == 2 ? q.dim(0) : 0);
  spec->set_dtype(ToProto(options.dtype));
  spec->set_workers(options.workers);
  for (int64_t n : options.shard_tokens) spec->add_shard_tokens(n);
  ToProto(options.options, spec->mutable_options());
  spec->set_return_state(options.return_state);
  spec->set_retain_seconds(options.retain_seconds);
  std::vector<const Tensor*> sets = {&context};
  for (const Tensor& q : queries) sets.push_back(&q);
  std::thread writer([&] {
    if (stream->Write(first)) WriteSets<v1::SubmitRequest>(stream.get(), sets, 0, options.dtype);
  });
  JobResult result;
  int64_t output_width = 0;
  std::vector<Tensor*> outputs;
  absl::Status failure;
  v1::SubmitResponse response;
  while (failure.ok() && stream->Read(&response)) {
    if (response.has_accepted()) {
      const v1::JobAccepted& a = response.accepted();
      result.job_id = a.job_id();
      result.shards.assign(a.shards().begin(), a.shards().end());
      output_width = a.output_width();
      if (on_accepted) on_accepted(a.job_id());
    } else if (response.has_progress()) {
      if (progress) progress(response.progress());
    } else if (response.has_output()) {
      if (outputs.empty()) {  // allocated only now, not while the upload competes for the cores
        result.output = Tensor({context.dim(0), output_width});
        for (const Tensor& q : queries) result.queries.emplace_back(std::vector<int64_t>{q.dim(0), output_width});
        outputs = {&result.output};
        for (Tensor& q : result.queries) outputs.push_back(&q);
      }
      failure = PlaceOutput(response.output(), outputs);
    } else if (response.has_state()) {
      const v1::Tensor& s = response.state();
      Tensor& t = result.state[s.name()];
      t.shape.assign(s.shape().begin(), s.shape().end());
      t.data.resize(s.data().size() / 4);
      std::memcpy(t.ptr(), s.data().data(), t.data.size() * 4);
    } else if (response.has_done()) {
      result.stats = response.done().stats();
    }
  }
  if (!failure.ok()) ctx.TryCancel();
  writer.join();  // Read has ended: a pending Write fails fast; Finish must not race it
  grpc::Status status = stream->Finish();
  LACT_RETURN_IF_ERROR(failure);
  LACT_RETURN_IF_ERROR(FromGrpcStatus(status));
  return result;
}

absl::StatusOr<std::vector<Tensor>> LactClient::Query(const std::string& job_id, const std::vector<Tensor>& queries,
                                                      WireType dtype, std::chrono::milliseconds timeout) {
  if (queries.empty()) return absl::InvalidArgumentError("no query sets");
  for (size_t k = 0; k < queries.size(); ++k) {
    if (queries[k].rank() != 2 || queries[k].dim(0) < 1 || queries[k].dim(1) != queries[0].dim(1) ||
        queries[k].dim(1) < 1) {
      return absl::InvalidArgumentError(absl::StrCat("query set ", k, " has shape ", ShapeString(queries[k].shape),
                                                     "; all must be [L_k >= 1, width >= 1] of one width"));
    }
  }
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  auto stream = stub_->Query(&ctx);
  v1::QueryRequest first;
  first.mutable_spec()->set_job_id(job_id);
  first.mutable_spec()->set_dtype(ToProto(dtype));
  first.mutable_spec()->set_token_width(queries.empty() ? 0 : static_cast<int32_t>(queries[0].dim(1)));
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
                                ? static_cast<int64_t>(response.output().data().size()) / 4 / response.output().tokens()
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
  return Unary<v1::JobInfo>(ForJob<v1::GetJobRequest>(job_id), [&](auto* c, const auto& q, auto* r) {
    return stub_->GetJob(c, q, r);
  });
}

absl::StatusOr<std::vector<v1::JobInfo>> LactClient::ListJobs() {
  LACT_ASSIGN_OR_RETURN(v1::ListJobsResponse response,
                        Unary<v1::ListJobsResponse>(v1::ListJobsRequest(), [&](auto* c, const auto& q, auto* r) {
                          return stub_->ListJobs(c, q, r);
                        }));
  return std::vector<v1::JobInfo>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::JobInfo> LactClient::CancelJob(const std::string& job_id) {
  return Unary<v1::JobInfo>(ForJob<v1::CancelJobRequest>(job_id), [&](auto* c, const auto& q, auto* r) {
    return stub_->CancelJob(c, q, r);
  });
}

absl::Status LactClient::DeleteJob(const std::string& job_id) {
  return Unary<v1::DeleteJobResponse>(ForJob<v1::DeleteJobRequest>(job_id), [&](auto* c, const auto& q, auto* r) {
           return stub_->DeleteJob(c, q, r);
         }).status();
}

absl::StatusOr<std::vector<v1::ModelInfo>> LactClient::ListModels() {
  LACT_ASSIGN_OR_RETURN(v1::ListModelsResponse response,
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
  return absl::NotFoundError(absl::StrCat("the cluster serves no model '", model, "' (available: ",
                                          absl::StrJoin(names, ", "), ")"));
}

}  // namespace lact
