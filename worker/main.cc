// lact-worker: serves the Worker service, registers with the coordinator,
// heartbeats, and runs shards. On SIGINT/SIGTERM it drains: takes no new
// work, deregisters, lets its running shards finish (up to
// --drain-seconds), then stops.
// Flags: Usage() below (--help).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/malloc_policy.h"
#include "common/metrics_endpoint.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "common/wire_limits.h"
#include "lact/v1/control.grpc.pb.h"
#include "proto/auth.h"
#include "proto/bulk_transport.h"
#include "proto/health.h"
#include "proto/keepalive.h"
#include "proto/stream_call.h"
#include "proto/tls.h"
#include "worker/backends.h"
#include "worker/data_plane/compute_line.h"
#include "worker/data_plane/data_service.h"
#include "worker/membership.h"
#include "worker/model_cache.h"
#include "worker/worker_service.h"

namespace lact {
namespace {

// The worker's secret and TLS: the cluster secret it presents to the
// coordinator and requires of it, its port's credentials (TLS when it has
// a certificate; clients of ShardData show none) and its channel's to the
// coordinator (verified against the CA, showing its certificate). Off
// loopback all are required.
struct Guards {
  std::string cluster_secret;
  std::shared_ptr<grpc::ServerCredentials> port;
  std::shared_ptr<grpc::ChannelCredentials> to_coordinator;
};

absl::StatusOr<Guards> LoadGuards(const Flags& flags, const std::string& host) {
  Guards g;
  if (std::optional<std::string> path = flags.Get("cluster-secret-file")) {
    LACT_ASSIGN_OR_RETURN(g.cluster_secret, ReadSecretFile(*path));
  }
  LACT_ASSIGN_OR_RETURN(TlsFiles tls, TlsFilesFromFlags(flags));
  if (!IsLoopbackHost(host) && (g.cluster_secret.empty() || !tls.serves_tls() || tls.ca.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--host ", host,
        " is not loopback: give --cluster-secret-file FILE (the secret the coordinator and its "
        "workers share) and --tls-cert, --tls-key and --tls-ca (this worker's certificate and "
        "the CA of the coordinator's), or listen on 127.0.0.1"));
  }
  LACT_ASSIGN_OR_RETURN(g.port, MakeServerCredentials(tls, false));
  LACT_ASSIGN_OR_RETURN(g.to_coordinator, MakeChannelCredentials(tls));
  return g;
}

// What the command line says; each member's initializer is its flag's
// default, which the usage text shows.
struct WorkerFlags {
  Flags flags;  // the TLS and metrics flags, read where they are used
  std::string coordinator;
  std::string host = "127.0.0.1";
  int64_t port = 0;
  BackendOptions backend;
  int64_t drain_seconds = 60;
  int64_t coordinator_grace_seconds = 300;
  int64_t retain_bytes = int64_t{8} << 30;
  int64_t retain_tenant_bytes = 0;  // default: --retain-bytes
  int64_t warm_bytes = 0;
  int64_t staging_bytes = int64_t{4} << 30;
  int pending_calls = FirstMessageLimits::kDefaultMaxWaiting;
  std::chrono::milliseconds first_message = FirstMessageLimits::kDefaultTimeout;
  int max_queries = 64;
};

// A byte count as the usage text shows it: in GiB where that is exact.
std::string ShownBytes(int64_t bytes) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  return bytes % kGiB == 0 ? absl::StrCat(bytes / kGiB, " GiB") : absl::StrCat(bytes);
}

// --help's text, in two parts: where it runs and what it keeps, then how
// it serves.
std::string UsageOfTheRuns(const WorkerFlags& d) {
  return absl::StrCat(
      "usage:\n"
      "   lact-worker --coordinator HOST:PORT [--host ",
      d.host, "] [--port ", d.port,
      "]\n"
      "               [--model-dir DIR] [--threads N] [--tile-tokens N]\n"
      "               [--backend cpu|cuda] [--device N] [--precision fp32|bf16]\n"
      "               [--scan-math fp32|tf32x3|bf16 (the SSD scan's math; default bf16 in bf16\n"
      "               precision where the model allows, else fp32)]\n"
      "               [--collective gloo|nccl] [--data-root DIR]\n"
      "               [--retain-bytes N (results and fused states kept for FetchResult and "
      "Query, default\n"
      "               ",
      ShownBytes(d.retain_bytes),
      ")] [--retain-bytes-per-tenant N (the most one "
      "tenant's jobs keep here;\n"
      "               default --retain-bytes)]\n");
}

std::string UsageOfTheService(const WorkerFlags& d) {
  return absl::StrCat(
      "               [--cluster-secret-file FILE (required off loopback: presented to the\n"
      "               coordinator's Control service and required of its calls here)]\n"
      "               [--tls-cert FILE --tls-key FILE --tls-ca FILE (required off loopback: "
      "this\n"
      "               worker's certificate, served and shown to Control; the CA of the "
      "coordinator's)]\n"
      "               [--drain-seconds ",
      d.drain_seconds,
      "]\n"
      "               [--coordinator-grace-seconds ",
      d.coordinator_grace_seconds,
      " (how long a shard runs on, and keeps its\n"
      "               outcome, with no coordinator following it: a restarted coordinator "
      "takes it\n"
      "               back within this; 0: a shard stops when its coordinator's call ends)]\n"
      "               [--max-pending-calls ",
      d.pending_calls, "] [--first-message-timeout-ms ", d.first_message.count(),
      "] (Transfer\n"
      "               streams that have not sent their ticket: how many at once, for how "
      "long)\n"
      "               [--max-queries ",
      d.max_queries,
      " (queries running here at once)]\n"
      "               [--staging-bytes N (the most memory, in decoded tokens, that shards "
      "waiting\n"
      "               behind the one computing may take before their turn, so that the next "
      "job's\n"
      "               upload overlaps this one's compute; default ",
      ShownBytes(d.staging_bytes),
      "; 0: none)]\n"
      "               [--spool-dir DIR (the coordinator's --spool-dir, shared: in-band "
      "contexts\n"
      "               are written there so a job can run again)]\n"
      "               [--no-huge-pages (contexts in 4 KiB pages, not transparent huge pages)]\n"
      "               [--warm-bytes N (touch N bytes of heap before registering and keep them "
      "for\n"
      "               jobs' buffers, so a first job runs as warm as a later one; default ",
      d.warm_bytes,
      ")]\n"
      "               [--advertise-host NAME (the host it registers, which peers dial and its\n"
      "               certificate names, e.g. a StatefulSet pod's DNS name; default --host)]\n"
      "               [--log-level debug|info|warn|error (JSON lines on stderr; default "
      "info)]\n"
      "               [--metrics-port N (Prometheus text at http://HOST:N/metrics; 0 picks a "
      "free\n"
      "               port; none by default)]\n");
}

std::string Usage() {
  const WorkerFlags d;
  return absl::StrCat(UsageOfTheRuns(d), UsageOfTheService(d));
}

constexpr const char* kFlagNames[] = {"coordinator",
                                      "host",
                                      "port",
                                      "model-dir",
                                      "threads",
                                      "tile-tokens",
                                      "backend",
                                      "device",
                                      "precision",
                                      "scan-math",
                                      "collective",
                                      "data-root",
                                      "retain-bytes",
                                      "retain-bytes-per-tenant",
                                      "cluster-secret-file",
                                      "tls-cert",
                                      "tls-key",
                                      "tls-ca",
                                      "drain-seconds",
                                      "coordinator-grace-seconds",
                                      "spool-dir",
                                      "no-huge-pages",
                                      "warm-bytes",
                                      "metrics-port",
                                      "advertise-host",
                                      "log-level",
                                      "max-pending-calls",
                                      "first-message-timeout-ms",
                                      "max-queries",
                                      "staging-bytes"};

absl::StatusOr<WorkerFlags> ParseFlags(int argc, char** argv) {
  WorkerFlags f;
  LACT_ASSIGN_OR_RETURN(
      f.flags, Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                            {std::begin(kFlagNames), std::end(kFlagNames)}, {}, {"no-huge-pages"}));
  const Flags& flags = f.flags;
  LACT_ASSIGN_OR_RETURN(f.coordinator, flags.Required("coordinator"));
  LACT_ASSIGN_OR_RETURN(f.port, flags.Int("port", f.port, 0, 65535));
  LACT_ASSIGN_OR_RETURN(const int64_t threads, flags.Int("threads", 0, 0, 1024));
  LACT_ASSIGN_OR_RETURN(const int64_t tile, flags.Int("tile-tokens", 0, 0, 1 << 24));
  LACT_ASSIGN_OR_RETURN(const int64_t device, flags.Int("device", 0, 0, 1024));
  LACT_ASSIGN_OR_RETURN(f.drain_seconds, flags.Int("drain-seconds", f.drain_seconds, 0, 86400));
  LACT_ASSIGN_OR_RETURN(
      f.coordinator_grace_seconds,
      flags.Int("coordinator-grace-seconds", f.coordinator_grace_seconds, 0, 86400));
  LACT_ASSIGN_OR_RETURN(const int64_t pending,
                        flags.Int("max-pending-calls", f.pending_calls, 1, 1 << 20));
  LACT_ASSIGN_OR_RETURN(
      const int64_t first_message,
      flags.Int("first-message-timeout-ms", f.first_message.count(), 100, 3600000));
  LACT_ASSIGN_OR_RETURN(const int64_t queries, flags.Int("max-queries", f.max_queries, 1, 1 << 16));
  f.max_queries = static_cast<int>(queries);
  LACT_ASSIGN_OR_RETURN(f.retain_bytes,
                        flags.Int("retain-bytes", f.retain_bytes, 0, int64_t{1} << 50));
  LACT_ASSIGN_OR_RETURN(f.retain_tenant_bytes,
                        flags.Int("retain-bytes-per-tenant", f.retain_bytes, 0, int64_t{1} << 50));
  LACT_ASSIGN_OR_RETURN(f.warm_bytes, flags.Int("warm-bytes", f.warm_bytes, 0, kMaxWarmBytes));
  LACT_ASSIGN_OR_RETURN(f.staging_bytes,
                        flags.Int("staging-bytes", f.staging_bytes, 0, int64_t{1} << 50));
  LACT_RETURN_IF_ERROR(InitLogFromFlag("lact-worker", flags.Get("log-level")));
  f.pending_calls = static_cast<int>(pending);
  f.first_message = std::chrono::milliseconds(first_message);
  f.host = flags.Get("host").value_or(f.host);
  const BackendOptions defaults;
  f.backend = {.backend = flags.Get("backend").value_or(defaults.backend),
               .threads = static_cast<int>(threads),
               .tile_tokens = tile,
               .device = static_cast<int>(device),
               .precision = flags.Get("precision").value_or(defaults.precision),
               .collective = flags.Get("collective").value_or(defaults.collective),
               .collective_host = f.host,
               .scan_math = flags.Get("scan-math").value_or(defaults.scan_math)};
  if (absl::Status s = ValidateBackend(f.backend); !s.ok())
    return absl::Status(s.code(), absl::StrCat("--backend ", f.backend.backend, ": ", s.message()));
  return f;
}

// What this worker registers: the address peers and clients dial (and its
// TLS certificate must name: --advertise-host, or --host), its metrics
// port, its backend and its models.
v1::RegisterRequest Registration(const WorkerFlags& f, int bound_port,
                                 const std::string& metrics_address, const ModelCache& models) {
  v1::RegisterRequest request;
  request.set_address(
      absl::StrCat(f.flags.Get("advertise-host").value_or(f.host), ":", bound_port));
  request.set_metrics_address(metrics_address);
  request.set_backend(f.backend.backend);
  request.set_threads(f.backend.threads);
  request.set_staging_bytes(f.staging_bytes);
  for (const auto& [name, config] : models.Catalog()) {
    v1::WorkerModel* m = request.add_models();
    m->set_name(name);
    m->set_config_json(ModelConfigToJson(config));
  }
  return request;
}

// The gRPC server with `services` on HOST:PORT; its port in *bound_port.
std::unique_ptr<grpc::Server> StartServer(const WorkerFlags& f,
                                          std::shared_ptr<grpc::ServerCredentials> credentials,
                                          std::vector<grpc::Service*> services, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(f.host, ":", f.port), std::move(credentials), bound_port);
  builder.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxServerMessageBytes);
  TuneBulkServer(&builder);
  SetKeepalive(&builder);
  for (grpc::Service* service : services) builder.RegisterService(service);
  return builder.BuildAndStart();
}

void LogStarted(const std::string& id, const v1::RegisterRequest& registered,
                const BackendOptions& backend, const ModelCache& models) {
  Log(LogLevel::kInfo, "started",
      {{"version", LactVersion()},
       {"worker", id},
       {"address", registered.address()},
       {"backend", backend.backend},
       {"precision", DescribeBackend(backend)},
       {"metrics", registered.metrics_address()},
       {"models", models.Catalog().size()}});
  std::printf("lact-worker %s listening on %s\n", id.c_str(), registered.address().c_str());
  std::fflush(stdout);
}

// --warm-bytes: the heap's pages a first job's buffers will take, touched
// before this worker takes work.
absl::Status Warm(int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  const absl::Time start = absl::Now();
  LACT_RETURN_IF_ERROR(WarmHeap(bytes));
  Log(LogLevel::kInfo, "heap_warmed",
      {{"bytes", bytes}, {"seconds", absl::ToDoubleSeconds(absl::Now() - start)}});
  return absl::OkStatus();
}

int Fail(const absl::Status& status, int code = 2) {
  std::fprintf(stderr, "lact-worker: %s\n", std::string(status.message()).c_str());
  return code;
}

// The worker's parts: its services over the model cache, the transfers it
// meets, the results it keeps and its metrics.
struct WorkerParts {
  std::unique_ptr<ModelCache> models;
  std::shared_ptr<v1::ControlService::Stub> control;
  std::string secret;
  TransferBoard transfers;
  std::unique_ptr<RetainedResults> results;
  std::unique_ptr<ShardBoard> shards;  // what each running shard's coordinator follows
  std::unique_ptr<ComputeLine> line;   // the shards' turns, and what waits for them
  std::unique_ptr<WorkerMetrics> metrics;
  std::atomic<bool> serving{false};  // what /readyz says: as lact.v1.WorkerService's health
  std::unique_ptr<MetricsEndpoint> metrics_endpoint;
};

// Serves until SIGINT/SIGTERM, then drains: no new work, the coordinator
// and the probes told so, the running shards given up to --drain-seconds
// to finish; then the server stops.
int Serve(const WorkerFlags& f, const Guards& guards, WorkerParts& p) {
  WorkerService service({p.models.get(), p.control, f.backend,
                         f.flags.Get("data-root").value_or(""),
                         f.flags.Get("spool-dir").value_or(""), &p.transfers, p.results.get(),
                         p.secret, !f.flags.Has("no-huge-pages"), p.metrics.get(), f.max_queries,
                         p.shards.get(), p.line.get()});
  DataService data(&p.transfers, p.results.get(), f.pending_calls, f.first_message);
  int bound_port = 0;
  std::unique_ptr<grpc::Server> server =
      StartServer(f, guards.port, {&service, &data}, &bound_port);
  if (!server || bound_port == 0) {
    return Fail(absl::UnavailableError(absl::StrCat("cannot listen on ", f.host, ":", f.port)), 1);
  }
  // Not serving until the coordinator knows this worker.
  const std::vector<std::string> served = {"lact.v1.WorkerService", "lact.v1.ShardDataService"};
  SetServing(*server, served, false);
  const std::string metrics_address =
      p.metrics_endpoint ? absl::StrCat(f.host, ":", p.metrics_endpoint->port()) : "";
  const v1::RegisterRequest registered = Registration(f, bound_port, metrics_address, *p.models);
  Membership membership(p.control, registered, p.results.get(), p.shards.get());
  absl::StatusOr<std::string> id = membership.Join();
  if (!id.ok()) return Fail(id.status(), 1);
  SetServing(*server, served, true);
  p.serving = true;
  LogStarted(*id, registered, f.backend, *p.models);
  WaitForStopSignal();
  Log(LogLevel::kInfo, "draining", {{"drain_seconds", f.drain_seconds}});
  service.Drain();
  SetServing(*server, served, false);
  p.serving = false;
  membership.Leave();
  if (!service.AwaitIdle(absl::Now() + absl::Seconds(f.drain_seconds))) {
    Log(LogLevel::kWarn, "drain_timed_out",
        {{"drain_seconds", f.drain_seconds}, {"consequence", "running shards are stopped"}});
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Log(LogLevel::kInfo, "stopped");
  return 0;
}

int Main(int argc, char** argv) {
  if (std::optional<int> answered = AnswerHelpOrVersion(argc, argv, "lact-worker", Usage().c_str()))
    return *answered;
  absl::StatusOr<WorkerFlags> f = ParseFlags(argc, argv);
  if (!f.ok()) return Fail(f.status());
  KeepFreedMemory();
  if (absl::Status warmed = Warm(f->warm_bytes); !warmed.ok()) return Fail(warmed, 1);
  EnableHealthAndReflection();
  absl::StatusOr<Guards> guards = LoadGuards(f->flags, f->host);
  if (!guards.ok()) return Fail(guards.status());
  WorkerParts p;
  p.secret = guards->cluster_secret;
  absl::StatusOr<std::unique_ptr<ModelCache>> models =
      ModelCache::Create(f->flags.Get("model-dir").value_or(""));
  if (!models.ok()) return Fail(models.status());
  p.models = *std::move(models);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  args.SetMaxSendMessageSize(kMaxServerMessageBytes);
  p.control = std::shared_ptr<v1::ControlService::Stub>(v1::ControlService::NewStub(
      MakeChannel(f->coordinator, guards->to_coordinator, args, p.secret)));
  p.results = std::make_unique<RetainedResults>(f->retain_bytes, f->retain_tenant_bytes);
  p.shards = std::make_unique<ShardBoard>(
      std::chrono::seconds(f->coordinator_grace_seconds),
      [results = p.results.get()](const BoardShard& shard) {
        results->Forget(shard.key().job_id, shard.fetch_ticket()).IgnoreError();
      });
  p.line = std::make_unique<ComputeLine>(f->staging_bytes);
  p.metrics = std::make_unique<WorkerMetrics>(p.results.get(), p.line.get(),
                                              DeviceMemoryReader(f->backend));
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint = MetricsEndpoint::StartIfAsked(
      f->flags, f->host, p.metrics->registry(), [&p] { p.metrics->Refresh(); },
      [&p] { return p.serving.load(); }, "lact-worker");
  if (!endpoint.ok()) return Fail(endpoint.status());
  p.metrics_endpoint = *std::move(endpoint);
  return Serve(*f, *guards, p);
}

}  // namespace
}  // namespace lact

int main(int argc, char** argv) {
  lact::BlockStopSignals(argv[0]);
  return lact::Main(argc, argv);
}
