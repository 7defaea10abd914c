#include "worker/worker_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/fused_state.h"
#include "common/peak_rss.h"
#include "common/status_macros.h"
#include "common/token_codec.h"
#include "proto/job_options.h"
#include "proto/status_conversion.h"
#include "worker/kv_store_client.h"

namespace lact {
namespace {

constexpr int64_t kMaxChunkBytes = 4 << 20;

struct JobModel {
  std::shared_ptr<const Model> model;
  ModelConfig config;  // with the job's overrides
};

absl::StatusOr<JobModel> ResolveJobModel(ModelCache& models, const std::string& name, const v1::JobOptions& o) {
  JobModel m;
  LACT_ASSIGN_OR_RETURN(m.model, models.Get(name));
  LACT_ASSIGN_OR_RETURN(m.config, ApplyJobOptions(m.model->config(), FromProto(o)));
  return m;
}

// Appends a float32 chunk at `offset` to rows already received (in order).
absl::Status AppendChunk(const v1::TokenChunk& chunk, int64_t width, int64_t capacity, Tensor* rows,
                         int64_t* filled) {
  if (chunk.offset() != *filled) {
    return absl::InvalidArgumentError(absl::StrCat("chunk at token ", chunk.offset(), "; expected ", *filled));
  }
  int64_t n = 0;
  LACT_RETURN_IF_ERROR(DecodeTokensInto(chunk.data(), WireType::kF32, width, chunk.offset(),
                                        rows->ptr() + *filled * width, (capacity - *filled) * width, &n));
  *filled += n;
  return absl::OkStatus();
}

template <typename Stream>
bool WriteRows(Stream* stream, const Tensor& rows, int set) {
  const int64_t width = rows.dim(1), per_chunk = std::max<int64_t>(1, kMaxChunkBytes / (4 * width));
  for (int64_t t0 = 0; t0 < rows.dim(0); t0 += per_chunk) {
    const int64_t n = std::min(per_chunk, rows.dim(0) - t0);
    v1::ShardResponse r;
    v1::TokenChunk* c = r.mutable_output();
    c->set_set(set);
    c->set_offset(t0);
    c->set_data(EncodeTokens(rows.ptr() + t0 * width, n * width, WireType::kF32));
    if (!stream->Write(r)) return false;
  }
  return true;
}

}  // namespace

grpc::Status WorkerService::RunShard(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<v1::ShardResponse, v1::ShardRequest>* stream) {
  v1::ShardRequest request;
  if (!stream->Read(&request) || !request.has_spec()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first RunShard message must be a ShardSpec");
  }
  const v1::ShardSpec spec = request.spec();
  absl::StatusOr<JobModel> job = ResolveJobModel(*models_, spec.model(), spec.options());
  if (!job.ok()) return ToGrpcStatus(job.status());
  const int64_t width = job->config.input_width();
  if (spec.tokens() < 1 || spec.tokens() > spec.total_tokens()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "shard needs 1..total_tokens tokens");
  }
  Tensor shard({spec.tokens(), width});
  int64_t filled = 0;
  while (stream->Read(&request)) {
    if (!request.has_chunk()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "expected token chunks");
    absl::Status s = AppendChunk(request.chunk(), width, spec.tokens(), &shard, &filled);
    if (!s.ok()) return ToGrpcStatus(s);
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled during upload");
  if (filled != spec.tokens()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("received ", filled, " of the shard's ", spec.tokens(), " tokens"));
  }
  RunHooks hooks{[&](int done, int) {
                   if (spec.rank() != 0) return;
                   v1::ShardResponse r;
                   r.set_layers_done(done);
                   stream->Write(r);
                 },
                 [context] { return context->IsCancelled(); }};
  absl::StatusOr<std::unique_ptr<ShardRunner>> runner =
      MakeShardRunner(options_, *job->model, job->config, std::move(hooks));
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  const std::chrono::milliseconds timeout(spec.collective_timeout_ms() > 0 ? spec.collective_timeout_ms() : 60000);
  KvStoreClient store(control_, timeout);
  const absl::Status joined =
      (*runner)->JoinGroup({&store, spec.rendezvous_prefix(), spec.rank(), spec.world_size(), timeout});
  if (!joined.ok()) return ToGrpcStatus(joined);

  const auto start = std::chrono::steady_clock::now();
  FusedState state;
  absl::StatusOr<Tensor> output =
      (*runner)->RunContextShard(std::move(shard), spec.begin(), spec.total_tokens(), &state);
  if (!output.ok()) return ToGrpcStatus(output.status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!WriteRows(stream, *output, 0)) return grpc::Status(grpc::StatusCode::CANCELLED, "coordinator went away");
  if (spec.rank() == 0) {
    for (const auto& [name, t] : FusedStateTensors(state)) {
      v1::ShardResponse r;
      v1::Tensor* out = r.mutable_state();
      out->set_name(name);
      for (int64_t d : t->shape) out->add_shape(d);
      out->set_data(EncodeTokens(t->ptr(), t->size(), WireType::kF32));
      if (!stream->Write(r)) return grpc::Status(grpc::StatusCode::CANCELLED, "coordinator went away");
    }
  }
  v1::ShardResponse done;
  done.mutable_done()->set_compute_seconds(seconds);
  done.mutable_done()->set_allreduce_seconds((*runner)->overlap().allreduce_seconds);
  done.mutable_done()->set_allreduce_waited_seconds((*runner)->overlap().waited_seconds);
  done.mutable_done()->set_peak_rss_bytes(PeakRssBytes());
  stream->Write(done);
  return grpc::Status::OK;
}

grpc::Status WorkerService::RunQuery(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<v1::ShardResponse, v1::WorkerQueryRequest>* stream) {
  v1::WorkerQueryRequest request;
  if (!stream->Read(&request) || !request.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first RunQuery message must be a header");
  }
  const v1::WorkerQueryHeader header = request.header();
  absl::StatusOr<JobModel> job = ResolveJobModel(*models_, header.model(), header.options());
  if (!job.ok()) return ToGrpcStatus(job.status());
  const int64_t width = job->config.input_width();
  std::map<std::string, Tensor> tensors;
  std::vector<Tensor> sets;
  std::vector<int64_t> filled(header.query_tokens_size(), 0);
  for (int64_t n : header.query_tokens()) sets.emplace_back(std::vector<int64_t>{n, width});
  while (stream->Read(&request)) {
    absl::Status s;
    if (request.has_state()) {
      const v1::Tensor& t = request.state();
      Tensor& dst = tensors[t.name()];
      dst.shape.assign(t.shape().begin(), t.shape().end());
      s = DecodeTokens(t.data(), WireType::kF32, 1, 0, &dst.data);
      if (s.ok() && dst.size() != Tensor::NumElements(dst.shape)) {
        s = absl::InvalidArgumentError(absl::StrCat("state tensor '", t.name(), "' size does not match its shape"));
      }
    } else if (request.has_chunk()) {
      const int set = request.chunk().set() - 1;
      if (set < 0 || set >= static_cast<int>(sets.size())) {
        s = absl::InvalidArgumentError(absl::StrCat("chunk for unknown query set ", request.chunk().set()));
      } else {
        s = AppendChunk(request.chunk(), width, sets[set].dim(0), &sets[set], &filled[set]);
      }
    }
    if (!s.ok()) return ToGrpcStatus(s);
  }
  for (size_t k = 0; k < sets.size(); ++k) {
    if (filled[k] != sets[k].dim(0)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("query set ", k, ": received ", filled[k], " of ", sets[k].dim(0), " tokens"));
    }
  }
  absl::StatusOr<FusedState> state = FusedStateFromTensors(job->config, std::move(tensors));
  if (!state.ok()) return ToGrpcStatus(state.status());
  absl::StatusOr<std::unique_ptr<ShardRunner>> runner =
      MakeShardRunner(options_, *job->model, job->config, {nullptr, [context] { return context->IsCancelled(); }});
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  for (size_t k = 0; k < sets.size(); ++k) {
    absl::StatusOr<Tensor> out = (*runner)->RunQuery(std::move(sets[k]), *state);
    if (!out.ok()) return ToGrpcStatus(out.status());
    if (!WriteRows(stream, *out, static_cast<int>(k) + 1)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "coordinator went away");
    }
  }
  v1::ShardResponse done;
  done.mutable_done()->set_peak_rss_bytes(PeakRssBytes());
  stream->Write(done);
  return grpc::Status::OK;
}

}  // namespace lact
