// The memory a client can make the service hold (the abuse cases),
// measured: a local cluster (a coordinator and two workers), and against
// it, one case at a time, what an attacker with a token does: Transfer
// calls that never send their ticket, Query calls that declare 4 GiB of query
// tokens each and send none, and a job that declares a 4 GiB context and
// sends one chunk per shard. For each case: the resident memory (VmRSS)
// of the coordinator and of the workers (summed) before and at the
// height of the case, next to the bytes the calls declared.
//   bench_abuse [--json FILE] [--idle-calls 1000] [--queries 64]
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/flags.h"
#include "common/token_codec.h"
#include "common/wire_limits.h"
#include "lact/v1/coordinator.grpc.pb.h"
#include "lact/v1/data.grpc.pb.h"

namespace lact {
namespace {

constexpr int64_t kWidth = 256;       // preset:small's input width
constexpr int64_t kTokens = 1 << 22;  // 4 GiB of float32 tokens
constexpr double kMiB = 1024.0 * 1024;

// VmRSS of `pid`, in bytes (0 if unreadable).
int64_t RssBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %lld kB", &kib) == 1) return kib * 1024;
  }
  return 0;
}

struct Memory {
  int64_t coordinator = 0, workers = 0;
};

Memory Sample(const LocalCluster& cluster) {
  return {RssBytes(cluster.coordinator_pid()),
          RssBytes(cluster.worker_pid(0)) + RssBytes(cluster.worker_pid(1))};
}

// The highest sample over `seconds` (every 100 ms).
Memory PeakOver(const LocalCluster& cluster, double seconds) {
  Memory peak;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const Memory m = Sample(cluster);
    peak.coordinator = std::max(peak.coordinator, m.coordinator);
    peak.workers = std::max(peak.workers, m.workers);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return peak;
}

struct Case {
  std::string name, outcome;
  double declared_gib = 0;
  Memory before, peak;
};

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// `n` Transfer calls to a worker that never send their ticket, held for a
// few seconds; then `extra` more, up to and beyond the worker's
// --max-pending-calls (1,024): how many were refused (the rest end at
// their 6 s deadline).
Case IdleTransfers(const LocalCluster& cluster, const std::string& worker, int n, int extra) {
  Case c{absl::StrCat(n, " Transfer calls sending nothing"), "", 0, Sample(cluster), {}};
  // 100 calls per connection (HTTP/2 peers commonly allow no more streams at once).
  std::vector<std::unique_ptr<v1::ShardDataService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::TransferRequest, v1::TransferResponse>>>
      calls;
  for (int i = 0; i < n + extra; ++i) {
    if (i % 100 == 0) stubs.push_back(v1::ShardDataService::NewStub(Channel(worker)));
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(i < n ? 20 : 6));
    calls.push_back(stubs.back()->Transfer(contexts.back().get()));
  }
  c.peak = PeakOver(cluster, 3);
  int refused = 0;
  for (int i = n; i < n + extra; ++i) {
    v1::TransferResponse response;
    while (calls[i]->Read(&response)) {
    }
    const grpc::Status st = calls[i]->Finish();
    refused += st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  for (int i = 0; i < n; ++i) contexts[i]->TryCancel();
  for (int i = 0; i < n; ++i) calls[i]->Finish().IgnoreError();
  c.outcome = absl::StrCat(refused, " of ", extra, " more refused (RESOURCE_EXHAUSTED)");
  return c;
}

// `n` Query calls on a finished job, each declaring kTokens query tokens
// and sending none of them.
Case UnsentQueries(const LocalCluster& cluster, const std::string& job_id, int n) {
  Case c{absl::StrCat(n, " Query calls declaring 4 GiB each, sending none"),
         "",
         n * kTokens * kWidth * 4.0 / (1 << 30),
         Sample(cluster),
         {}};
  auto stub = v1::CoordinatorService::NewStub(Channel(cluster.address()));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::QueryResponse>>> calls;
  v1::QueryRequest request;
  request.mutable_spec()->set_job_id(job_id);
  request.mutable_spec()->add_query_tokens(kTokens);
  request.mutable_spec()->set_token_width(kWidth);
  request.mutable_spec()->set_dtype(v1::F32);
  for (int i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    calls.push_back(stub->Query(contexts.back().get(), request));
  }
  c.peak = PeakOver(cluster, 3);
  for (auto& ctx : contexts) ctx->TryCancel();
  int refused = 0;
  for (auto& call : calls) {
    refused += call->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  c.outcome = absl::StrCat(n - refused, " held until the client went away, ", refused,
                           " refused (--max-queries-per-tenant)");
  return c;
}

// One shard's Transfer: its ticket and one 4 MiB chunk sent, then nothing.
struct StalledTransfer {
  std::unique_ptr<v1::ShardDataService::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TransferRequest, v1::TransferResponse>> stream;
};

std::unique_ptr<StalledTransfer> StartStalledTransfer(const v1::JobAccepted& accepted, int rank) {
  static const std::string chunk = EncodeFloats(std::vector<float>(kMaxChunkBytes / 4, 0.5f).data(),
                                                kMaxChunkBytes / 4, WireType::kF32);
  auto t = std::make_unique<StalledTransfer>();
  t->stub = v1::ShardDataService::NewStub(Channel(accepted.shards(rank).worker()));
  t->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  t->stream = t->stub->Transfer(&t->ctx);
  v1::TransferRequest first;
  first.mutable_ticket()->set_job_id(accepted.job_id());
  first.mutable_ticket()->set_rank(rank);
  first.mutable_ticket()->set_ticket(accepted.ticket());
  t->stream->Write(first);
  v1::TransferRequest data;
  data.mutable_chunk()->set_set(0);
  data.mutable_chunk()->set_offset(0);
  data.mutable_chunk()->set_data(chunk);
  t->stream->Write(data);
  return t;
}

// A job declaring a kTokens context in band; each shard's Transfer sends
// its ticket and one 4 MiB chunk, then stalls.
Case StalledUpload(const LocalCluster& cluster) {
  Case c{"a 4 GiB context declared, one 4 MiB chunk sent per shard",
         "",
         kTokens * kWidth * 4.0 / (1 << 30),
         Sample(cluster),
         {}};
  auto stub = v1::CoordinatorService::NewStub(Channel(cluster.address()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::SubmitRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->set_model("preset:small");
  spec->set_context_tokens(kTokens);
  spec->set_token_width(kWidth);
  spec->set_dtype(v1::F32);
  spec->set_workers(2);
  auto submit = stub->Submit(&ctx, request);
  v1::SubmitResponse response;
  v1::JobAccepted accepted;
  while (submit->Read(&response)) {
    if (response.has_accepted()) {
      accepted = response.accepted();
      break;
    }
  }
  if (accepted.job_id().empty()) {
    c.outcome = absl::StrCat("not accepted: ", submit->Finish().error_message());
    return c;
  }
  std::vector<std::unique_ptr<StalledTransfer>> transfers;
  for (int rank = 0; rank < accepted.shards_size(); ++rank)
    transfers.push_back(StartStalledTransfer(accepted, rank));
  c.peak = PeakOver(cluster, 3);
  ctx.TryCancel();
  for (auto& t : transfers) t->ctx.TryCancel();
  for (auto& t : transfers) t->stream->Finish().IgnoreError();
  c.outcome = absl::StrCat("job ", accepted.job_id().substr(0, 12),
                           "...: ", submit->Finish().error_message());
  return c;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                                             {"json", "idle-calls", "queries"});
  if (!flags.ok()) {
    std::fprintf(stderr, "bench_abuse: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const int idle = static_cast<int>(flags->Int("idle-calls", 1000, 1, 1000).value_or(1000));
  const int queries = static_cast<int>(flags->Int("queries", 64, 1, 1000).value_or(64));
  LocalClusterOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "bench_abuse: %s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  LactClient client((*cluster)->address());
  SubmitOptions job;
  job.model = "preset:small";
  job.workers = 2;
  job.return_state = false;
  Tensor context({256, kWidth});
  for (size_t i = 0; i < context.data.size(); ++i) context.data[i] = 0.001f * (i % 997);
  absl::StatusOr<JobResult> done = client.Submit(job, context, {});
  if (!done.ok()) {
    std::fprintf(stderr, "bench_abuse: the job for Query: %s\n",
                 std::string(done.status().message()).c_str());
    return 1;
  }
  std::vector<Case> cases;
  cases.push_back(IdleTransfers(**cluster, done->shards[0].worker(), idle, 1100 - idle));
  cases.push_back(UnsentQueries(**cluster, done->job_id, queries));
  cases.push_back(StalledUpload(**cluster));
  std::printf("%-58s %9s %11s %11s %11s %11s  %s\n", "case", "declared", "coord MiB", "peak",
              "workers MiB", "peak", "outcome");
  for (const Case& c : cases) {
    std::printf("%-58s %7.0f G %11.0f %11.0f %11.0f %11.0f  %s\n", c.name.c_str(), c.declared_gib,
                c.before.coordinator / kMiB, c.peak.coordinator / kMiB, c.before.workers / kMiB,
                c.peak.workers / kMiB, c.outcome.c_str());
  }
  if (std::optional<std::string> json = flags->Get("json")) {
    std::ofstream f(*json);
    f << "{\n  \"cluster\": \"lact local: a coordinator and 2 workers (1 thread each)\",\n"
      << "  \"cases\": [\n";
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      f << absl::StrFormat(
          "    {\"case\": \"%s\", \"declared_gib\": %.0f, \"coordinator_mib_before\": %.0f, "
          "\"coordinator_mib_peak\": %.0f, \"workers_mib_before\": %.0f, \"workers_mib_peak\": "
          "%.0f, \"outcome\": \"%s\"}%s\n",
          c.name, c.declared_gib, c.before.coordinator / kMiB, c.peak.coordinator / kMiB,
          c.before.workers / kMiB, c.peak.workers / kMiB, c.outcome,
          i + 1 < cases.size() ? "," : "");
    }
    f << "  ]\n}\n";
  }
  return 0;
}

}  // namespace
}  // namespace lact

int main(int argc, char** argv) { return lact::Main(argc, argv); }
