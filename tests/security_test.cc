// Who may call a lact cluster, on a real loopback cluster: the Control
// service (register, heartbeat, rendezvous keys) and the workers' Worker
// service serve only callers that present the cluster's secret, so a rogue
// process can neither register an address to receive a job's tokens nor
// start a shard; with --auth-tokens every public call needs a bearer
// token, and a job is visible only to the tenant that submitted it
// (others get NOT_FOUND, as for a job that does not exist); with TLS,
// jobs run over every encrypted port, plaintext and untrusted clients are
// refused, and Control takes only certificates of the cluster's CA.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/lact_client.h"
#include "client/local_credentials.h"
#include "common/npy.h"
#include "lact/v1/control.grpc.pb.h"
#include "lact/v1/data.grpc.pb.h"
#include "lact/v1/worker.grpc.pb.h"
#include "proto/auth.h"
#include "proto/tls.h"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "tests/service_support.h"

namespace lact::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-0123456789";
constexpr char kTokenB[] = "token-of-tenant-b-0123456789";

std::string TokenFile() {
  const std::string path = absl::StrCat(::testing::TempDir(), "/lact_tokens_", getpid());
  std::ofstream(path) << "# tenant token\na " << kTokenA << "\nb " << kTokenB << "\n";
  return path;
}

// The cluster's data root, with a folder for each tenant.
std::string DataRoot() {
  const std::string root = absl::StrCat(::testing::TempDir(), "/lact_tenant_root_", getpid());
  fs::create_directories(root + "/a");
  fs::create_directories(root + "/b");
  return root;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ =
        StartTestCluster(2, {}, DataRoot(), {"--auth-tokens", TokenFile()}, kTokenA).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    fs::remove(TokenFile());
    fs::remove_all(DataRoot());
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  static LactClient Tenant(const std::string& token) {
    return LactClient(cluster_->address(), ClientSecurity{token});
  }
  // A short job of tenant a (with a query set), or a status.
  static absl::StatusOr<JobResult> SubmitAsA(const std::string& spec_tenant = "") {
    SubmitOptions o;
    o.model = "preset:small:4";
    o.workers = 2;
    o.tenant = spec_tenant;
    o.timeout = std::chrono::seconds(60);
    return Tenant(kTokenA).Submit(o, RandomTokens(64, 256, 5), {RandomTokens(8, 256, 6)});
  }

  static LocalCluster* cluster_;
};

LocalCluster* SecurityTest::cluster_ = nullptr;

TEST_F(SecurityTest, PublicCallsNeedAKnownToken) {
  absl::StatusOr<std::vector<v1::ModelInfo>> none = LactClient(cluster_->address()).ListModels();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("needs a bearer token"));
  absl::StatusOr<std::vector<v1::ModelInfo>> wrong =
      Tenant("not-a-token-of-this-cluster").ListModels();
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Tenant(kTokenA).ListModels().ok());
  absl::StatusOr<JobResult> job =
      LactClient(cluster_->address())
          .Submit(SubmitOptions{.model = "preset:small:4"}, RandomTokens(8, 256, 1), {});
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(SecurityTest, AJobIsItsTenantsAlone) {
  // The JobSpec names tenant b, but the job is a's: the token decides.
  absl::StatusOr<JobResult> job = SubmitAsA("b");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->job_id;
  EXPECT_TRUE(std::regex_match(id, std::regex("job-[0-9a-f]{32}"))) << id << ": 128 random bits";

  absl::StatusOr<v1::JobInfo> mine = Tenant(kTokenA).GetJob(id);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->tenant(), "a");
  EXPECT_EQ(mine->status(), v1::JobInfo::SUCCEEDED);

  LactClient b = Tenant(kTokenB);
  EXPECT_EQ(b.GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.WatchJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.CancelJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.DeleteJob(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b.Query(id, {RandomTokens(4, 256, 7)}).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<v1::JobInfo>> listed = b.ListJobs();
  ASSERT_TRUE(listed.ok());
  for (const v1::JobInfo& info : *listed) EXPECT_NE(info.job_id(), id);
  const std::string unknown = "job-0123456789abcdef0123456789abcdef";
  EXPECT_EQ(absl::StrReplaceAll(b.GetJob(id).status().message(), {{id, "ID"}}),
            absl::StrReplaceAll(b.GetJob(unknown).status().message(), {{unknown, "ID"}}))
      << "another tenant's job reads exactly as one that does not exist";

  // Still whole for its owner.
  absl::StatusOr<JobResult> again = Tenant(kTokenA).Query(id, {RandomTokens(8, 256, 6)});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->queries[0].data, job->queries[0].data);
  EXPECT_TRUE(Tenant(kTokenA).DeleteJob(id).ok());
}

TEST_F(SecurityTest, EachTenantsFilesStayInItsFolder) {
  const std::string root = DataRoot();
  const Tensor context = RandomTokens(64, 256, 5);
  ASSERT_TRUE(WriteNpy(root + "/a/context.npy", context).ok());
  ASSERT_TRUE(WriteNpy(root + "/b/context.npy", context).ok());
  const auto by_reference = [](const std::string& token, const std::string& in,
                               const std::string& out) {
    SubmitOptions o;
    o.model = "preset:small:4";
    o.workers = 2;
    o.return_state = false;
    o.timeout = std::chrono::seconds(60);
    o.output = OutputTarget::File({out});
    return Tenant(token).Submit(o, ContextInput::File({in}), {}).status();
  };
  // Relative paths start in the tenant's own folder.
  ASSERT_TRUE(by_reference(kTokenA, "context.npy", "out.npy").ok());
  absl::StatusOr<Tensor> written = ReadNpy(root + "/a/out.npy");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->shape, (std::vector<int64_t>{64, 256}));

  struct Case {
    std::string in, out;
  } others[] = {
      {"../a/context.npy", "mine.npy"},
      {root + "/a/context.npy", "mine.npy"},
      {"file://" + root + "/a/context.npy", "mine.npy"},
      {"context.npy", root + "/a/out.npy"},
      {"context.npy", "../a/out.npy"},
  };
  for (const Case& c : others) {
    const absl::Status s = by_reference(kTokenB, c.in, c.out);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied)
        << c.in << " -> " << c.out << ": " << s;
  }
  EXPECT_FALSE(fs::exists(root + "/b/mine.npy"));
  absl::StatusOr<Tensor> kept = ReadNpy(root + "/a/out.npy");
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->data == written->data) << "tenant a's output untouched by tenant b";
}

TEST_F(SecurityTest, ControlServesOnlyTheClusterSecret) {
  const auto control = [](const std::string& address, const std::string& secret) {
    return v1::ControlService::NewStub(
        MakeChannel(address, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(), secret));
  };
  v1::RegisterRequest rogue;
  rogue.set_address("127.0.0.1:1");
  rogue.set_backend("cpu");
  for (const std::string& secret : {std::string(), std::string("a-guess-at-the-secret-0000")}) {
    grpc::ClientContext ctx;
    v1::RegisterResponse response;
    const grpc::Status s =
        control(cluster_->control_address(), secret)->Register(&ctx, rogue, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    grpc::ClientContext kv_ctx;
    v1::KvSetRequest set;
    set.set_key("job-x/rank0");
    set.set_value("127.0.0.1:1");
    v1::KvSetResponse set_response;
    EXPECT_EQ(control(cluster_->control_address(), secret)
                  ->KvSet(&kv_ctx, set, &set_response)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {  // Not on the public port at all.
    grpc::ClientContext ctx;
    v1::RegisterResponse response;
    EXPECT_EQ(control(cluster_->address(), "")->Register(&ctx, rogue, &response).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  absl::StatusOr<std::vector<v1::ModelInfo>> models = Tenant(kTokenA).ListModels();
  ASSERT_TRUE(models.ok());
  for (const v1::ModelInfo& m : *models) EXPECT_LE(m.workers(), 2) << m.name();
}

TEST_F(SecurityTest, WorkersRunShardsOnlyForTheCoordinator) {
  absl::StatusOr<JobResult> job = SubmitAsA();
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string worker = job->shards.at(0).worker();
  auto stub =
      v1::WorkerService::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::RunShardRequest request;
  request.mutable_spec()->set_job_id("job-rogue");
  auto stream = stub->RunShard(&ctx, request);
  v1::RunShardResponse response;
  while (stream->Read(&response)) {
  }
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  grpc::ClientContext forget_ctx;
  v1::ForgetRequest forget;
  forget.set_job_id(job->job_id);
  v1::ForgetResponse forgot;
  EXPECT_EQ(stub->Forget(&forget_ctx, forget, &forgot).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Tenant(kTokenA).Query(job->job_id, {RandomTokens(8, 256, 6)}).ok())
      << "the retained state is still there";
}

// A cluster with TLS on every port (a CA and a certificate for 127.0.0.1
// made for it) and tenants' tokens.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalClusterOptions options;
    options.workers = 2;
    options.tls = true;
    options.coordinator_args = {"--auth-tokens", TokenFile()};
    options.token = kTokenA;
    cluster_ = StartTestCluster(std::move(options)).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  static LocalCluster* cluster_;
};

LocalCluster* TlsTest::cluster_ = nullptr;

TEST_F(TlsTest, AGoldenJobOverTlsMatches) {
  // In band, so the tokens, outputs and state cross the workers' TLS ports;
  // the workers meet through the coordinator's Control port over mutual TLS.
  absl::StatusOr<GoldenCase> golden = LoadGoldenCase("tiny");
  ASSERT_TRUE(golden.ok()) << golden.status();
  ASSERT_FALSE(cluster_->security().tls_roots.empty());
  LactClient client(cluster_->address(), cluster_->security());
  SubmitOptions o = GoldenOptions(*golden);
  o.workers = 2;
  absl::StatusOr<JobResult> got = client.Submit(o, golden->context, golden->queries);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectGolden(*golden, *got);
  absl::StatusOr<JobResult> later = client.Query(got->job_id, golden->queries);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->queries[0].data, got->queries[0].data);
}

// The status of ListModels with a 3 s deadline over `credentials`: a
// failed handshake shows as UNAVAILABLE, or as DEADLINE_EXCEEDED while
// gRPC keeps retrying the connection.
grpc::StatusCode ListModelsOver(const std::string& address,
                                std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = v1::CoordinatorService::NewStub(
      MakeChannel(address, std::move(credentials), grpc::ChannelArguments(), kTokenA));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::ListModelsRequest request;
  v1::ListModelsResponse response;
  return stub->ListModels(&ctx, request, &response).error_code();
}

TEST_F(TlsTest, PlaintextAndUntrustedClientsAreRefused) {
  const auto refused =
      ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(ListModelsOver(cluster_->address(), grpc::InsecureChannelCredentials()), refused);
  // Another CA's roots: the cluster's certificate does not verify.
  const std::string dir = absl::StrCat(::testing::TempDir(), "/lact_other_ca_", getpid());
  fs::create_directories(dir);
  absl::StatusOr<LocalCredentials> other = MakeLocalCredentials(dir);
  ASSERT_TRUE(other.ok()) << other.status();
  std::ifstream in(other->ca_file);
  const std::string roots((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  EXPECT_THAT(ListModelsOver(cluster_->address(), ChannelCredentialsFromPem(roots)), refused);
  EXPECT_EQ(ListModelsOver(cluster_->address(),
                           ChannelCredentialsFromPem(cluster_->security().tls_roots)),
            grpc::StatusCode::OK);
}

TEST_F(TlsTest, ControlTakesOnlyClientCertificatesOfTheClusterCa) {
  // Trusting the cluster's CA but showing no certificate of its own, a
  // caller never reaches the service (UNAVAILABLE at the handshake, not
  // UNAUTHENTICATED from the secret check).
  auto stub = v1::ControlService::NewStub(MakeChannel(
      cluster_->control_address(), ChannelCredentialsFromPem(cluster_->security().tls_roots),
      grpc::ChannelArguments(), ""));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::RegisterRequest rogue;
  rogue.set_address("127.0.0.1:1");
  v1::RegisterResponse response;
  const grpc::Status s = stub->Register(&ctx, rogue, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

// Transfer streams that open and send nothing: at most a worker's
// --max-pending-calls wait for their ticket at once, each at most its
// --first-message-timeout-ms.
// Opens 4 calls with `open` and sends nothing on them, against a server
// whose limits are 3 waiting calls and 1000 ms: one is refused
// (RESOURCE_EXHAUSTED) and three time out (DEADLINE_EXCEEDED), each
// saying which limit, well before the calls' own 30 s deadlines.
template <typename Response, typename Open>
void ExpectIdleCallsBounded(const char* method, const Open& open) {
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<decltype(open(nullptr))> calls;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    calls.push_back(open(contexts.back().get()));
  }
  const auto start = std::chrono::steady_clock::now();
  int refused = 0, timed_out = 0;
  for (auto& call : calls) {
    Response response;
    while (call->Read(&response)) {
    }
    const grpc::Status s = call->Finish();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(s.error_message(), HasSubstr("3 calls already wait for their first message"));
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << method << ": " << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("no first message within 1000 ms"));
      ++timed_out;
    }
  }
  EXPECT_EQ(refused, 1) << method;
  EXPECT_EQ(timed_out, 3) << method;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << method << ": ended by the server's limit, not by the calls' 30 s deadlines";
}

// Threads of a process, from /proc (-1 if it cannot be read).
int ThreadCount(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(CallLimits, WaitingQueriesAreCappedPerTenantAndCostFewThreads) {
  // 1,000 Query calls of one tenant, each waiting for a Transfer stream
  // that never comes: the tenant's first 16 (--max-queries-per-tenant)
  // wait, each holding a thread on the coordinator and on the worker; the
  // rest are refused at once with RESOURCE_EXHAUSTED naming the cap. The
  // threads of both stay within 50 of idle, and a job runs meanwhile.
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(1, {}, "", {"--upload-idle-timeout-ms", "60000"});
  ASSERT_NE(cluster, nullptr);
  SubmitOptions o;
  o.model = "preset:small:4";
  o.timeout = std::chrono::seconds(60);
  absl::StatusOr<JobResult> job =
      LactClient(cluster->address()).Submit(o, RandomTokens(16, 256, 3), {});
  ASSERT_TRUE(job.ok()) << job.status();
  const int coordinator_idle = ThreadCount(cluster->coordinator_pid());
  const int worker_idle = ThreadCount(cluster->worker_pid(0));
  ASSERT_GT(coordinator_idle, 0);
  ASSERT_GT(worker_idle, 0);
  v1::QueryRequest request;
  request.mutable_spec()->set_job_id(job->job_id);
  request.mutable_spec()->add_query_tokens(8);
  request.mutable_spec()->set_token_width(256);
  request.mutable_spec()->set_dtype(v1::F32);
  std::vector<std::unique_ptr<v1::CoordinatorService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::QueryResponse>>> calls;
  for (int i = 0; i < 1000; ++i) {
    if (i % 100 == 0) {  // 100 calls per connection, as HTTP/2 peers commonly allow
      grpc::ChannelArguments args;
      args.SetInt("lact.test.connection", i);
      stubs.push_back(v1::CoordinatorService::NewStub(
          grpc::CreateCustomChannel(cluster->address(), grpc::InsecureChannelCredentials(), args)));
    }
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    calls.push_back(stubs.back()->Query(contexts.back().get(), request));
  }
  int waiting = 0, refused = 0;
  for (auto& call : calls) {
    v1::QueryResponse response;
    if (call->Read(&response) && response.has_accepted()) {
      ++waiting;
      continue;
    }
    const grpc::Status s = call->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_THAT(
        s.error_message(),
        HasSubstr("16 Query calls already run, the most allowed (--max-queries-per-tenant)"));
    ++refused;
  }
  EXPECT_EQ(waiting, 16);
  EXPECT_EQ(refused, 984);
  absl::StatusOr<JobResult> beside =
      LactClient(cluster->address()).Submit(o, RandomTokens(16, 256, 4), {});
  EXPECT_TRUE(beside.ok()) << beside.status();
  const int coordinator_busy = ThreadCount(cluster->coordinator_pid());
  const int worker_busy = ThreadCount(cluster->worker_pid(0));
  EXPECT_LE(coordinator_busy - coordinator_idle, 50)
      << coordinator_idle << " -> " << coordinator_busy << " coordinator threads";
  EXPECT_LE(worker_busy - worker_idle, 50)
      << worker_idle << " -> " << worker_busy << " worker threads";
  for (auto& context : contexts) context->TryCancel();
  calls.clear();
}

TEST(CallLimits, AWorkersIdleStreamsAreBoundedInNumberAndTime) {
  std::unique_ptr<LocalCluster> cluster =
      StartTestCluster(1, {"--max-pending-calls", "3", "--first-message-timeout-ms", "1000"});
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
      LactClient(cluster->address()).ListWorkers();
  ASSERT_TRUE(workers.ok() && workers->size() == 1) << workers.status();
  auto channel = grpc::CreateChannel((*workers)[0].address(), grpc::InsecureChannelCredentials());
  auto data = v1::ShardDataService::NewStub(channel);
  ExpectIdleCallsBounded<v1::TransferResponse>(
      "Transfer", [&](grpc::ClientContext* c) { return data->Transfer(c); });
  SubmitOptions o;
  o.model = "preset:small:4";
  o.timeout = std::chrono::seconds(60);
  EXPECT_TRUE(LactClient(cluster->address()).Submit(o, RandomTokens(16, 256, 3), {}).ok())
      << "the waiting calls are counted out again";
}

TEST(SecurityFlags, OffLoopbackTheCoordinatorAndWorkersNeedSecrets) {
  const std::string bin = std::getenv("LACT_BIN_DIR") ? std::getenv("LACT_BIN_DIR") : LACT_BIN_DIR;
  const auto run = [](const std::string& command) {
    const std::string out = absl::StrCat(::testing::TempDir(), "/lact_flags_", getpid());
    const int rc = std::system((command + " > " + out + " 2>&1").c_str());
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove(out);
    return std::make_pair(WEXITSTATUS(rc), text);
  };
  auto [rc, text] = run(bin + "/lact-coordinator --host 0.0.0.0 --port 0");
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(text, HasSubstr("is not loopback: give --auth-tokens FILE"));
  EXPECT_THAT(text, HasSubstr("--tls-cert, --tls-key and --tls-ca"));
  std::tie(rc, text) = run(bin + "/lact-worker --coordinator 127.0.0.1:1 --host 0.0.0.0");
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(text, HasSubstr("is not loopback: give --cluster-secret-file FILE"));
  EXPECT_THAT(text, HasSubstr("--tls-cert, --tls-key and --tls-ca"));
  const std::string short_secret = absl::StrCat(::testing::TempDir(), "/lact_short_", getpid());
  std::ofstream(short_secret) << "short\n";
  std::tie(rc, text) = run(bin + "/lact-coordinator --cluster-secret-file " + short_secret);
  fs::remove(short_secret);
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(text, HasSubstr("is 5 bytes; need at least 16"));
}

}  // namespace
}  // namespace lact::testing
