// The data plane end to end, through real processes and real gRPC on
// 127.0.0.1 with real files: a job by reference (the workers read the
// context and write the output under the cluster's --data-root) gives the
// same bytes as the same job in band, for every golden case over 1-3
// workers, a model 768 features wide and bf16 files; so does a context of
// wire rows from the caller's memory with outputs into its buffer (the
// Python client's transfers); bad references fail before
// any worker computes and write nothing outside the root; a raw client's
// bad chunks, wrong ticket, stall and disconnect on a ShardDataService.Transfer
// stream each end the job with a status that names the problem, and a
// CancelJob reaches a shard waiting for its upload; a client
// with gRPC's default 4 MiB limit runs a preset:base job with queries and
// its state.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/model_config.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/token_codec.h"
#include "lact/v1/coordinator.grpc.pb.h"
#include "lact/v1/data.grpc.pb.h"
#include "proto/result_tally.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "tests/raw_job.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A model with 768 features in and out (small inside, so it builds and runs
// fast), written into the test cluster's model folder as "wide768".
void WriteWideModel() {
  const ModelConfig c{.d_model = 64,
                      .d_input = 768,
                      .d_output = 768,
                      .ssm = {.head_dim = 32, .d_state = 16},
                      .ttt = {.head_dim = 32},
                      .mlp_hidden = 128};
  const Model model = RandomTestModel(c, 17);
  SafetensorsWriter writer;
  for (const auto& [name, t] : model.tensors()) writer.Add(name, t);
  writer.SetMetadata("lact.config", ModelConfigToJson(c));
  ASSERT_TRUE(writer.Write(ModelDir() + "/wide768.safetensors").ok());
}

std::string DataRootDir() {
  static const std::string dir = [] {
    const std::string base = absl::StrCat(::testing::TempDir(), "/lact_data_plane_", getpid());
    fs::remove_all(base);
    fs::create_directories(base + "/root/jobs");
    fs::create_directories(base + "/outside");
    return base + "/root";
  }();
  return dir;
}

class DataPlaneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WriteWideModel();
    cluster_ = StartTestCluster(3, {}, DataRootDir()).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    fs::remove_all(fs::path(DataRootDir()).parent_path());
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  LactClient Client() { return LactClient(cluster_->address()); }
  static std::string Path(const std::string& name) { return DataRootDir() + "/jobs/" + name; }

  // The job in band, then by reference (context from an .npy, output to
  // one); both results must be equal bit for bit.
  void ExpectSameBothWays(SubmitOptions o, const Tensor& context,
                          const std::vector<Tensor>& queries, const std::string& name) {
    SCOPED_TRACE(name);
    absl::StatusOr<JobResult> in_band = Client().Submit(o, context, queries);
    ASSERT_TRUE(in_band.ok()) << in_band.status();
    ASSERT_TRUE(WriteNpy(Path(name + ".npy"), context).ok());
    o.output = OutputTarget::File({Path(name + ".out.npy")});
    absl::StatusOr<JobResult> by_ref =
        Client().Submit(o, ContextInput::File({Path(name + ".npy")}), queries);
    ASSERT_TRUE(by_ref.ok()) << by_ref.status();
    EXPECT_EQ(by_ref->stats.coordinator_payload_bytes(), 0);
    EXPECT_EQ(by_ref->output.size(), 0) << "the output went to the file";
    absl::StatusOr<Tensor> written = ReadNpy(Path(name + ".out.npy"));
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->shape, in_band->output.shape);
    EXPECT_TRUE(written->data == in_band->output.data) << "by reference differs from in band";
    ASSERT_EQ(by_ref->queries.size(), in_band->queries.size());
    for (size_t k = 0; k < queries.size(); ++k) {
      EXPECT_TRUE(by_ref->queries[k].data == in_band->queries[k].data);
    }
    ASSERT_EQ(by_ref->state.size(), in_band->state.size());
    for (const auto& [tensor, t] : in_band->state)
      EXPECT_TRUE(by_ref->state.at(tensor).data == t.data) << tensor;
  }

  static LocalCluster* cluster_;
};

LocalCluster* DataPlaneTest::cluster_ = nullptr;

TEST_F(DataPlaneTest, GoldenCasesByReferenceEqualInBandOverOneTwoAndThreeWorkers) {
  for (const std::string& name : GoldenCaseNames()) {
    absl::StatusOr<GoldenCase> golden = LoadGoldenCase(name);
    ASSERT_TRUE(golden.ok()) << golden.status();
    for (int workers = 1; workers <= 3; ++workers) {
      SubmitOptions o = GoldenOptions(*golden);
      o.workers = workers;
      ExpectSameBothWays(o, golden->context, golden->queries, absl::StrCat(name, "_p", workers));
    }
  }
}

TEST_F(DataPlaneTest, Width768ByReferenceEqualsInBand) {
  const Tensor context = RandomTokens(48, 768, 7);
  for (int workers = 1; workers <= 3; ++workers) {
    SubmitOptions o;
    o.model = "wide768";
    o.workers = workers;
    o.timeout = std::chrono::seconds(120);
    ExpectSameBothWays(o, context, {RandomTokens(5, 768, 8)}, absl::StrCat("base_p", workers));
  }
}

TEST_F(DataPlaneTest, Bf16FileEqualsBf16OnTheWire) {
  const Tensor context = RandomTokens(64, 32, 9);
  SubmitOptions o;
  o.model = "tiny";
  o.workers = 2;
  o.dtype = WireType::kBF16;
  o.timeout = std::chrono::seconds(60);
  absl::StatusOr<JobResult> wire = Client().Submit(o, context, {});
  ASSERT_TRUE(wire.ok()) << wire.status();
  std::string header = NpyF32Header({64, 32});
  header.replace(header.find("'<f4'"), 5, "'|V2'");
  std::ofstream(Path("bf16.npy"), std::ios::binary)
      << header << EncodeFloats(context.ptr(), context.size(), WireType::kBF16);
  absl::StatusOr<JobResult> file = Client().Submit(o, ContextInput::File({Path("bf16.npy")}), {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->output.data == wire->output.data);
}

TEST_F(DataPlaneTest, WireRowsIntoTheCallersBufferEqualATensorInBand) {
  const Tensor context = RandomTokens(64, 32, 10);
  const std::vector<Tensor> queries = {RandomTokens(3, 32, 11)};
  SubmitOptions o;
  o.model = "tiny";
  o.workers = 2;
  o.timeout = std::chrono::seconds(60);
  for (WireType dtype : {WireType::kF32, WireType::kBF16, WireType::kF16}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    o.dtype = dtype;
    o.output = OutputTarget::Memory();
    absl::StatusOr<JobResult> tensor = Client().Submit(o, context, queries);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    const std::string wire = EncodeFloats(context.ptr(), context.size(), dtype);
    std::vector<float> rows(tensor->output.size(), -1.0f);
    o.output = OutputTarget::Buffer(rows.data());
    absl::StatusOr<JobResult> got =
        Client().Submit(o, ContextInput::Wire({wire.data(), 64, 32, dtype}), queries);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->output.size(), 0) << "the outputs went to the caller's buffer";
    EXPECT_TRUE(rows == tensor->output.data) << "wire rows differ from the tensor";
    ASSERT_EQ(got->queries.size(), 1u);
    EXPECT_TRUE(got->queries[0].data == tensor->queries[0].data);
  }
  o.dtype = WireType::kF32;
  const std::string bf16 = EncodeFloats(context.ptr(), context.size(), WireType::kBF16);
  absl::StatusOr<JobResult> refused =
      Client().Submit(o, ContextInput::Wire({bf16.data(), 64, 32, WireType::kBF16}), {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("the context's rows are bf16 but the job's dtype is f32"));
}

TEST_F(DataPlaneTest, BadReferencesFailBeforeAnyWorkerComputes) {
  const Tensor context = RandomTokens(16, 32, 1);
  ASSERT_TRUE(WriteNpy(Path("good.npy"), context).ok());
  ASSERT_TRUE(WriteNpy(Path("wide.npy"), RandomTokens(16, 33, 1)).ok());
  const std::string outside = fs::path(DataRootDir()).parent_path().string() + "/outside";
  ASSERT_TRUE(WriteNpy(outside + "/secret.npy", context).ok());
  {
    std::ifstream in(Path("good.npy"), std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    std::ofstream(Path("short.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 100);
    std::string f64 = bytes;
    f64.replace(f64.find("'<f4'"), 5, "'<f8'");
    std::ofstream(Path("f64.npy"), std::ios::binary) << f64;
  }
  fs::create_directories(Path("a_folder.npy"));
  fs::create_directory_symlink(outside, Path("linked"));
  std::ofstream(Path("taken.npy")) << "someone's file";
  ASSERT_EQ(mkfifo(Path("pipe.npy").c_str(), 0600), 0);
  struct Case {
    std::string context, output;
    absl::StatusCode code;
    std::string message;
  } cases[] = {
      {outside + "/secret.npy", "", absl::StatusCode::kPermissionDenied, "outside the data root"},
      {"../outside/secret.npy", "", absl::StatusCode::kPermissionDenied, "'..' is not followed"},
      {Path("linked/secret.npy"), "", absl::StatusCode::kPermissionDenied,
       "symlinks are not followed"},
      {Path("pipe.npy"), "", absl::StatusCode::kInvalidArgument, "is a FIFO, not a regular file"},
      {Path("missing.npy"), "", absl::StatusCode::kNotFound, "does not exist"},
      {Path("short.npy"), "", absl::StatusCode::kInvalidArgument,
       "too short for its header's 16 x 32 tokens"},
      {Path("f64.npy"), "", absl::StatusCode::kInvalidArgument, "dtype '<f8' is not a token dtype"},
      {Path("wide.npy"), "", absl::StatusCode::kInvalidArgument,
       "token_width 33 does not match model 'tiny'"},
      {Path("good.npy"), outside + "/out.npy", absl::StatusCode::kPermissionDenied,
       "outside the data root"},
      {Path("good.npy"), Path("no/such/folder/out.npy"), absl::StatusCode::kNotFound,
       "its folder 'jobs/no' does not exist"},
      {Path("good.npy"), Path("linked/out.npy"), absl::StatusCode::kPermissionDenied,
       "symlinks are not followed"},
      {Path("good.npy"), Path("a_folder.npy"), absl::StatusCode::kInvalidArgument,
       "is a folder, not a regular file"},
      {Path("good.npy"), Path("taken.npy"), absl::StatusCode::kAlreadyExists,
       "never replaces a file unless asked"},
      {Path("good.npy"), Path("good.npy"), absl::StatusCode::kInvalidArgument,
       "is the context file itself"},
  };
  for (const Case& c : cases) {
    SubmitOptions o;
    o.model = "tiny";
    o.timeout = std::chrono::seconds(30);
    if (!c.output.empty()) o.output = OutputTarget::File({c.output});
    bool accepted = false;
    absl::StatusOr<JobResult> got = Client().Submit(o, ContextInput::File({c.context}), {}, nullptr,
                                                    [&](const std::string&) { accepted = true; });
    EXPECT_EQ(got.status().code(), c.code)
        << c.context << " -> " << c.output << ": " << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message)) << c.context;
    EXPECT_FALSE(accepted) << "refused before a worker was given the job";
  }
  EXPECT_FALSE(fs::exists(outside + "/out.npy")) << "nothing written outside the root";
  std::ifstream taken(Path("taken.npy"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(taken), {}), "someone's file");
  absl::StatusOr<Tensor> good = ReadNpy(Path("good.npy"));
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->data == context.data) << "the context file untouched";
}

TEST_F(DataPlaneTest, AQueryWhoseTransferNeverComesEndsAtTheIdleLimit) {
  SubmitOptions o;
  o.model = "tiny";
  o.timeout = std::chrono::seconds(30);
  absl::StatusOr<JobResult> job = Client().Submit(o, RandomTokens(16, 32, 3), {});
  ASSERT_TRUE(job.ok()) << job.status();
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::QueryRequest spec;
  spec.mutable_spec()->set_job_id(job->job_id);
  spec.mutable_spec()->add_query_tokens(8);
  spec.mutable_spec()->set_token_width(32);
  spec.mutable_spec()->set_dtype(v1::F32);
  auto call = stub->Query(&context, spec);
  const auto start = std::chrono::steady_clock::now();
  v1::QueryResponse response;
  ASSERT_TRUE(call->Read(&response));
  ASSERT_TRUE(response.has_accepted());
  ASSERT_EQ(response.accepted().shards_size(), 1);
  EXPECT_EQ(response.accepted().shards(0).worker(), job->shards[0].worker());
  EXPECT_FALSE(response.accepted().ticket().empty());
  while (call->Read(&response)) {
  }
  const grpc::Status s = call->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no Transfer stream from the client for 1000 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "ended by the idle limit, not by the call's 60 s deadline";
  absl::StatusOr<JobResult> later = Client().Query(job->job_id, {RandomTokens(8, 32, 4)});
  EXPECT_TRUE(later.ok()) << later.status() << ": the state is still there";
}

TEST_F(DataPlaneTest, ByReferenceJobOutlivesItsClientUnlessAsked) {
  const Tensor context = RandomTokens(16384, 256, 13);
  SubmitOptions o;
  o.model = "preset:small:2";
  o.workers = 2;
  o.return_state = false;
  o.timeout = std::chrono::seconds(120);
  absl::StatusOr<JobResult> in_band = Client().Submit(o, context, {});
  ASSERT_TRUE(in_band.ok()) << in_band.status();
  ASSERT_TRUE(WriteNpy(Path("detached.npy"), context).ok());
  const ContextInput file = ContextInput::File({Path("detached.npy")});
  o.output = OutputTarget::File({Path("detached.out.npy")});
  o.detach = true;
  absl::StatusOr<JobResult> detached = Client().Submit(o, file, {});
  ASSERT_TRUE(detached.ok()) << detached.status();
  int changes = 0;
  absl::StatusOr<v1::JobInfo> end =
      Client().WatchJob(detached->job_id, [&](const v1::JobInfo&) { ++changes; });
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->status(), v1::JobInfo::SUCCEEDED) << end->error();
  EXPECT_GE(changes, 2) << "progress while it ran, then its end";
  absl::StatusOr<Tensor> written = ReadNpy(Path("detached.out.npy"));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_TRUE(written->data == in_band->output.data) << "the detached job's output differs";

  o.cancel_on_disconnect = true;
  o.output = OutputTarget::File({Path("asked.out.npy")});
  absl::StatusOr<JobResult> asked = Client().Submit(o, file, {});
  ASSERT_TRUE(asked.ok()) << asked.status();
  end = Client().WatchJob(asked->job_id);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->status(), v1::JobInfo::CANCELLED);
  EXPECT_THAT(end->error(), HasSubstr("the client went away"));
  EXPECT_FALSE(fs::exists(Path("asked.out.npy"))) << "a cancelled job's output file is removed";
  EXPECT_TRUE(fs::exists(Path("detached.out.npy"))) << "only the file the job made";

  o = SubmitOptions{.model = "tiny", .detach = true};
  EXPECT_EQ(Client().Submit(o, RandomTokens(4, 32, 1), {}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a job with tokens in band cannot detach before its upload";
  EXPECT_EQ(Client().WatchJob("job-0-none").status().code(), absl::StatusCode::kNotFound);
}

v1::JobSpec TinySpec(int64_t tokens) {
  v1::JobSpec spec;
  spec.set_model("tiny");
  spec.set_context_tokens(tokens);
  spec.set_token_width(32);
  spec.set_dtype(v1::F32);
  spec.set_workers(1);
  return spec;
}

v1::TransferRequest Chunk(int set, int64_t offset, const std::vector<float>& values) {
  v1::TransferRequest r;
  r.mutable_chunk()->set_set(set);
  r.mutable_chunk()->set_offset(offset);
  r.mutable_chunk()->set_data(
      EncodeFloats(values.data(), static_cast<int64_t>(values.size()), WireType::kF32));
  return r;
}

TEST_F(DataPlaneTest, BadChunksEndTheJobWithAMessage) {
  std::vector<float> row(32, 0.5f), nan_row = row;
  nan_row[7] = std::nanf("");
  struct Case {
    std::vector<v1::TransferRequest> chunks;
    std::string message;
  } cases[] = {
      {{Chunk(0, 0, std::vector<float>(33))}, "is not a whole number of 32-wide tokens"},
      {{Chunk(0, 5, row)}, "starts at token 5; expected token 0"},
      {{Chunk(0, 0, row), Chunk(0, 0, row)}, "starts at token 0; expected token 1"},
      {{Chunk(0, 0, nan_row)}, "token 0 feature 7 is nan; tokens must be finite"},
      {{Chunk(0, 0, std::vector<float>(32 * 9))}, "runs to token 9, past the set's 8 tokens"},
      {{Chunk(2, 0, row)}, "chunk for set 2; this shard takes set 0 (context) and 0 query sets"},
      {{Chunk(0, 0, std::vector<float>(32 * 40000))}, "exceeds the 4 MiB limit"},
      {{Chunk(0, 0, row)}, "the upload ended after 1 of the 8 tokens of the shard's context"},
  };
  for (const Case& c : cases) {
    RawJob job(cluster_->address(), TinySpec(8));
    ASSERT_FALSE(job.accepted().job_id().empty());
    RawJob::Transfer t = job.Open(0, job.accepted().ticket());
    for (const v1::TransferRequest& chunk : c.chunks) t.stream->Write(chunk);
    const grpc::Status transfer = t.Close();
    EXPECT_EQ(transfer.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.message << ": " << transfer.error_message();
    EXPECT_THAT(transfer.error_message(), HasSubstr(c.message));
    const grpc::Status s = job.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.message << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
  }
}

TEST_F(DataPlaneTest, WrongTicketIsRefusedAndTheJobTimesOut) {
  RawJob job(cluster_->address(), TinySpec(8));
  RawJob::Transfer t = job.Open(0, "not-the-ticket");
  const grpc::Status refused = t.Close();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  const grpc::Status s = job.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no Transfer stream from the client for 1000 ms"));
}

// A Query from the protos alone, step by step as docs/api.md gives it: the
// QuerySpec, the JobAccepted naming the worker and the query's own ticket,
// the sets over that worker's Transfer stream (a context chunk there is
// refused, naming what the stream takes), JobDone with no payload bytes.
TEST_F(DataPlaneTest, AQueryMovesItsSetsOverTheWorkersTransferStream) {
  RawJob job(cluster_->address(), TinySpec(8));
  ASSERT_TRUE(job.Upload(0, RandomTokens(8, 32, 21), {}).Close().ok());
  ASSERT_TRUE(job.Finish().ok());
  const Tensor set = RandomTokens(4, 32, 22);
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  for (const bool context_chunk : {true, false}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::QueryRequest spec;
    spec.mutable_spec()->set_job_id(job.accepted().job_id());
    spec.mutable_spec()->add_query_tokens(4);
    spec.mutable_spec()->set_token_width(32);
    spec.mutable_spec()->set_dtype(v1::F32);
    auto call = stub->Query(&context, spec);
    v1::QueryResponse response;
    ASSERT_TRUE(call->Read(&response));
    ASSERT_TRUE(response.has_accepted());
    const v1::JobAccepted& accepted = response.accepted();
    EXPECT_EQ(accepted.shards(0).worker(), job.accepted().shards(0).worker());
    EXPECT_NE(accepted.ticket(), job.accepted().ticket()) << "each query has its own";
    RawJob::Transfer t = job.Open(0, accepted.ticket());
    if (context_chunk) t.stream->Write(Chunk(0, 0, std::vector<float>(32)));
    t.stream->Write(Chunk(1, 0, std::vector<float>(set.data.begin(), set.data.end())));
    t.stream->WritesDone();
    v1::TransferResponse out;
    std::string rows;
    std::optional<v1::TransferComplete> complete;
    while (t.stream->Read(&out)) {
      if (out.has_complete()) {
        EXPECT_FALSE(complete.has_value()) << "one completion message, the last";
        complete = out.complete();
        continue;
      }
      ASSERT_FALSE(complete.has_value()) << "nothing after the completion message";
      ASSERT_EQ(out.output().set(), 1);
      EXPECT_EQ(out.output().offset() * accepted.output_width() * 4,
                static_cast<int64_t>(rows.size()));
      rows += out.output().data();
    }
    const grpc::Status moved = t.stream->Finish();
    bool done = false;
    while (call->Read(&response)) {
      done =
          done || (response.has_done() && response.done().stats().coordinator_payload_bytes() == 0);
    }
    const grpc::Status s = call->Finish();
    if (context_chunk) {
      EXPECT_EQ(moved.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << moved.error_message();
      EXPECT_THAT(moved.error_message(),
                  HasSubstr("chunk for set 0; this shard takes 1 query sets"));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("chunk for set 0; this shard takes 1 query sets"));
      continue;
    }
    ASSERT_TRUE(moved.ok()) << moved.error_message();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(done) << "JobDone, with 0 payload bytes through the coordinator";
    ASSERT_TRUE(complete.has_value()) << "the stream ends with its completion message";
    EXPECT_EQ(complete->bytes(), static_cast<int64_t>(rows.size()));
    EXPECT_EQ(complete->crc32c(), Crc32c(0, rows));
    absl::StatusOr<JobResult> by_client = Client().Query(job.accepted().job_id(), {set});
    ASSERT_TRUE(by_client.ok()) << by_client.status();
    ASSERT_EQ(rows.size(), by_client->queries[0].data.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(rows.data(), by_client->queries[0].data.data(), rows.size()), 0)
        << "the same outputs as the C++ client's Query";
  }
}

TEST_F(DataPlaneTest, ATransferResetAfterItsTicketIsReopenedWithTheSameTicket) {
  // The client sends its ticket, resets the stream 0, 1, 10 or 100 ms
  // later, and opens it again with the same ticket at once, as data.proto
  // says: 20 trials at each delay, every job succeeding on the reopened
  // stream, its outputs bit for bit those of an undisturbed run.
  const Tensor context = RandomTokens(8, 32, 40);
  std::string undisturbed;
  {
    RawJob job(cluster_->address(), TinySpec(8));
    ASSERT_TRUE(job.Upload(0, context, {}).CloseKeepingOutputs(&undisturbed).ok());
    ASSERT_TRUE(job.Finish().ok());
    ASSERT_EQ(undisturbed.size(), 8u * 32 * 4);
  }
  for (const int delay_ms : {0, 1, 10, 100}) {
    int succeeded = 0;
    for (int trial = 0; trial < 20; ++trial) {
      RawJob job(cluster_->address(), TinySpec(8));
      {
        RawJob::Transfer reset = job.Open(0, job.accepted().ticket());
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        reset.Cut();
        reset.stream->Finish().IgnoreError();
      }
      std::string rows;
      const grpc::Status moved = job.Upload(0, context, {}).CloseKeepingOutputs(&rows);
      const grpc::Status done = job.Finish();
      EXPECT_TRUE(moved.ok()) << delay_ms << " ms, trial " << trial << ": "
                              << moved.error_message();
      EXPECT_TRUE(done.ok()) << delay_ms << " ms, trial " << trial << ": " << done.error_message();
      EXPECT_TRUE(rows == undisturbed) << delay_ms << " ms, trial " << trial;
      succeeded += moved.ok() && done.ok() && rows == undisturbed;
    }
    EXPECT_EQ(succeeded, 20) << "reset " << delay_ms << " ms after the ticket";
  }
}

TEST_F(DataPlaneTest, StalledUploadEndsTheJob) {
  RawJob job(cluster_->address(), TinySpec(100));
  RawJob::Transfer t = job.Open(0, job.accepted().ticket());
  t.stream->Write(Chunk(0, 0, std::vector<float>(32 * 10, 0.1f)));
  const grpc::Status s = job.Finish();  // the coordinator allows 1 s between chunks
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no token chunk for 1000 ms during the upload"));
  const grpc::Status stalled = t.Close();
  EXPECT_EQ(stalled.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << "the stalled stream was ended too, saying why: " << stalled.error_message();
  EXPECT_THAT(stalled.error_message(), HasSubstr("no token chunk for 1000 ms"));
  absl::StatusOr<v1::JobInfo> info = Client().GetJob(job.accepted().job_id());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status(), v1::JobInfo::FAILED);
}

TEST_F(DataPlaneTest, CancelJobReachesAShardWaitingForItsUpload) {
  RawJob job(cluster_->address(), TinySpec(100));
  RawJob::Transfer t = job.Open(0, job.accepted().ticket());
  t.stream->Write(Chunk(0, 0, std::vector<float>(32 * 10, 0.1f)));
  // Whether the worker took the stream before the cancel reached its shard
  // or after (then it remembers why the shard ended), the stream is told
  // the same.
  ASSERT_TRUE(Client().CancelJob(job.accepted().job_id()).ok());
  // Ended before the 1 s idle limit could end it (DEADLINE_EXCEEDED): the
  // worker heard the cancel.
  const grpc::Status transfer = t.Close();
  EXPECT_EQ(transfer.error_code(), grpc::StatusCode::CANCELLED) << transfer.error_message();
  EXPECT_THAT(transfer.error_message(), HasSubstr("the job was cancelled during the upload"))
      << "the stream says why it ended";
  const grpc::Status s = job.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
}

TEST_F(DataPlaneTest, ClientDisconnectsMidUpload) {
  std::string job_id;
  {
    RawJob job(cluster_->address(), TinySpec(100));
    job_id = job.accepted().job_id();
    RawJob::Transfer t = job.Open(0, job.accepted().ticket());
    t.stream->Write(Chunk(0, 0, std::vector<float>(32 * 10, 0.1f)));
    std::this_thread::sleep_for(
        std::chrono::milliseconds(300));  // the chunk is in; the idle limit is 1 s
    t.ctx->TryCancel();
    t.stream->Finish().IgnoreError();
    job.Finish().IgnoreError();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  absl::StatusOr<v1::JobInfo> info;
  do {
    info = Client().GetJob(job_id);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (info.ok() && info->status() == v1::JobInfo::RUNNING &&
           std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(info.ok()) << info.status();
  // The client left: the job is CANCELLED, as its Submit call's status says,
  // naming where it was seen.
  EXPECT_EQ(info->status(), v1::JobInfo::CANCELLED) << info->error();
  EXPECT_THAT(info->error(), HasSubstr("cancelled: the client went away (worker "));
  EXPECT_THAT(info->error(), HasSubstr("during the upload"));
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok());
  absl::StatusOr<JobResult> next =
      Client().Submit(GoldenOptions(*golden), golden->context, golden->queries);
  ASSERT_TRUE(next.ok()) << next.status();
  ExpectGolden(*golden, *next);
}

TEST_F(DataPlaneTest, DefaultMessageLimitsRunABaseJobWithQueriesAndState) {
  // LactClient sets no channel options: gRPC's 4 MiB receive limit holds,
  // and preset:base's fast weights (4.7 MB each) arrive in pieces.
  SubmitOptions o;
  o.model = "preset:base:4";
  o.workers = 1;  // a fresh worker builds preset:base longer than the tests' 5 s rendezvous allows
  o.timeout = std::chrono::seconds(120);
  const Tensor context = RandomTokens(40, 768, 11);
  const std::vector<Tensor> queries = {RandomTokens(3, 768, 12)};
  absl::StatusOr<JobResult> got = Client().Submit(o, context, queries);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->output.shape, (std::vector<int64_t>{40, 768}));
  ASSERT_EQ(got->queries.size(), 1u);
  const Tensor& w0 = got->state.at("layers.0.ttt.w0");
  EXPECT_GT(w0.size() * 4, int64_t{4} << 20) << "a state tensor larger than one message";
  absl::StatusOr<JobResult> later = Client().Query(got->job_id, queries);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_TRUE(later->queries[0].data == got->queries[0].data)
      << "the kept state answers as the job did";
}

}  // namespace
}  // namespace lact::testing
