// lact-worker: serves the Worker service, registers with the coordinator,
// heartbeats, and runs shards. On SIGINT/SIGTERM it drains: takes no new
// work, deregisters, lets its running shards finish (up to
// --drain-seconds, 60), then stops.
// Flags: kUsage below (--help).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
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
#include "proto/tls.h"
#include "worker/backends.h"
#include "worker/cpu/cpu_runner.h"
#include "worker/data_service.h"
#include "worker/model_cache.h"
#include "worker/worker_service.h"

namespace lact {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "   lact-worker --coordinator HOST:PORT [--host 127.0.0.1] [--port 0]\n"
    "               [--model-dir DIR] [--threads N] [--tile-tokens N]\n"
    "               [--backend cpu|cuda] [--device N] [--precision fp32|bf16]\n"
    "               [--scan-math fp32|tf32x3 (the SSD scan's products on the tensor cores)]\n"
    "               [--collective gloo|nccl] [--data-root DIR]\n"
    "               [--retain-bytes N (results and fused states kept for FetchResult and Query, "
    "default\n"
    "               8 GiB)] [--retain-bytes-per-tenant N (the most one tenant's jobs keep here;\n"
    "               default --retain-bytes)]\n"
    "               [--cluster-secret-file FILE (required off loopback: presented to the\n"
    "               coordinator's Control service and required of its calls here)]\n"
    "               [--tls-cert FILE --tls-key FILE --tls-ca FILE (required off loopback: this\n"
    "               worker's certificate, served and shown to Control; the CA of the "
    "coordinator's)]\n"
    "               [--drain-seconds 60]\n"
    "               [--max-pending-calls 1024] [--first-message-timeout-ms 30000] (streams that\n"
    "               have not sent their first message: how many at once, for how long)\n"
    "               [--spool-dir DIR (the coordinator's --spool-dir, shared: in-band contexts\n"
    "               are written there so a job can run again)]\n"
    "               [--no-huge-pages (contexts in 4 KiB pages, not transparent huge pages)]\n"
    "               [--advertise-host NAME (the host it registers, which peers dial and its\n"
    "               certificate names, e.g. a StatefulSet pod's DNS name; default --host)]\n"
    "               [--log-level debug|info|warn|error (JSON lines on stderr; default info)]\n"
    "               [--metrics-port N (Prometheus text at http://HOST:N/metrics; 0 picks a free\n"
    "               port; none by default)]\n";

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

absl::StatusOr<std::string> Register(v1::Control::Stub& control, const std::string& address,
                                     const std::string& metrics_address, const ModelCache& models,
                                     const BackendOptions& backend, int* interval_ms) {
  v1::RegisterRequest request;
  request.set_address(address);
  request.set_metrics_address(metrics_address);
  request.set_backend(backend.backend);
  request.set_threads(backend.threads);
  for (const auto& [name, config] : models.Catalog()) {
    v1::WorkerModel* m = request.add_models();
    m->set_name(name);
    m->set_config_json(ModelConfigToJson(config));
  }
  grpc::Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {  // ~30 s for the coordinator to come up
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::RegisterResponse response;
    last = control.Register(&ctx, request, &response);
    if (last.ok()) {
      *interval_ms = response.heartbeat_interval_ms();
      return response.worker_id();
    }
    if (last.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        last.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      break;  // no retry will fix a wrong secret or request
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot register with the coordinator: ", last.error_message()));
}

int Main(int argc, char** argv) {
  if (std::optional<int> answered = AnswerHelpOrVersion(argc, argv, "lact-worker", kUsage))
    return *answered;
  absl::StatusOr<Flags> flags = Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                                             {"coordinator",
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
                                              "cluster-secret-file",
                                              "tls-cert",
                                              "tls-key",
                                              "tls-ca",
                                              "drain-seconds",
                                              "spool-dir",
                                              "no-huge-pages",
                                              "metrics-port",
                                              "advertise-host",
                                              "log-level",
                                              "max-pending-calls",
                                              "first-message-timeout-ms"},
                                             {}, {"no-huge-pages"});
  absl::StatusOr<std::string> coordinator =
      flags.ok() ? flags->Required("coordinator") : flags.status();
  absl::StatusOr<int64_t> port = flags.ok() ? flags->Int("port", 0, 0, 65535) : flags.status();
  absl::StatusOr<int64_t> threads = flags.ok() ? flags->Int("threads", 0, 0, 1024) : flags.status();
  absl::StatusOr<int64_t> tile =
      flags.ok() ? flags->Int("tile-tokens", 0, 0, 1 << 24) : flags.status();
  absl::StatusOr<int64_t> device = flags.ok() ? flags->Int("device", 0, 0, 1024) : flags.status();
  absl::StatusOr<int64_t> drain_seconds =
      flags.ok() ? flags->Int("drain-seconds", 60, 0, 86400) : flags.status();
  absl::StatusOr<int64_t> pending =
      flags.ok() ? flags->Int("max-pending-calls", 1024, 1, 1 << 20) : flags.status();
  absl::StatusOr<int64_t> first_message =
      flags.ok() ? flags->Int("first-message-timeout-ms", 30000, 100, 3600000) : flags.status();
  absl::StatusOr<int64_t> retain_bytes =
      flags.ok() ? flags->Int("retain-bytes", int64_t{8} << 30, 0, int64_t{1} << 50)
                 : flags.status();
  absl::StatusOr<int64_t> retain_tenant_bytes =
      flags.ok() && retain_bytes.ok()
          ? flags->Int("retain-bytes-per-tenant", *retain_bytes, 0, int64_t{1} << 50)
          : flags.status();
  const absl::Status logged =
      flags.ok() ? InitLogFromFlag("lact-worker", flags->Get("log-level")) : flags.status();
  for (const absl::Status& s :
       {coordinator.status(), port.status(), threads.status(), tile.status(), device.status(),
        retain_bytes.status(), retain_tenant_bytes.status(), drain_seconds.status(),
        pending.status(), first_message.status(), logged}) {
    if (!s.ok()) {
      std::fprintf(stderr, "lact-worker: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  KeepFreedMemory();
  EnableHealthAndReflection();
  const std::string host = flags->Get("host").value_or("127.0.0.1");
  absl::StatusOr<Guards> guards = LoadGuards(*flags, host);
  if (!guards.ok()) {
    std::fprintf(stderr, "lact-worker: %s\n", std::string(guards.status().message()).c_str());
    return 2;
  }
  const std::string& secret = guards->cluster_secret;
  const BackendOptions backend{flags->Get("backend").value_or("cpu"),
                               static_cast<int>(*threads),
                               *tile,
                               static_cast<int>(*device),
                               flags->Get("precision").value_or("fp32"),
                               flags->Get("collective").value_or("gloo"),
                               host,
                               flags->Get("scan-math").value_or("fp32")};
  if (absl::Status s = ValidateBackend(backend); !s.ok()) {
    std::fprintf(stderr, "lact-worker: --backend %s: %s\n", backend.backend.c_str(),
                 std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ModelCache>> models =
      ModelCache::Create(flags->Get("model-dir").value_or(""));
  if (!models.ok()) {
    std::fprintf(stderr, "lact-worker: %s\n", std::string(models.status().message()).c_str());
    return 2;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  args.SetMaxSendMessageSize(kMaxServerMessageBytes);
  auto control = std::shared_ptr<v1::Control::Stub>(
      v1::Control::NewStub(MakeChannel(*coordinator, guards->to_coordinator, args, secret)));

  TransferBoard transfers;
  RetainedResults results(*retain_bytes, *retain_tenant_bytes);
  WorkerMetrics metrics(&results, DeviceMemoryReader(backend));
  std::atomic<bool> serving{false};  // what /readyz says: as lact.v1.Worker's health
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics_endpoint = MetricsEndpoint::StartIfAsked(
      *flags, host, metrics.registry(), [&metrics] { metrics.Refresh(); },
      [&serving] { return serving.load(); }, "lact-worker");
  if (!metrics_endpoint.ok()) {
    std::fprintf(stderr, "lact-worker: %s\n",
                 std::string(metrics_endpoint.status().message()).c_str());
    return 2;
  }
  const std::string metrics_address =
      *metrics_endpoint ? absl::StrCat(host, ":", (*metrics_endpoint)->port()) : "";
  WorkerService service({models->get(), control, backend, flags->Get("data-root").value_or(""),
                         flags->Get("spool-dir").value_or(""), &transfers, &results, secret,
                         !flags->Has("no-huge-pages"), &metrics, static_cast<int>(*pending),
                         std::chrono::milliseconds(*first_message)});
  DataService data(&transfers, &results, static_cast<int>(*pending),
                   std::chrono::milliseconds(*first_message));
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", *port), guards->port, &bound_port);
  builder.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxServerMessageBytes);
  TuneBulkServer(&builder);
  SetKeepalive(&builder);
  builder.RegisterService(&service);
  builder.RegisterService(&data);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "lact-worker: cannot listen on %s:%lld\n", host.c_str(),
                 static_cast<long long>(*port));
    return 1;
  }
  // Not serving until the coordinator knows this worker.
  const std::vector<std::string> served = {"lact.v1.Worker", "lact.v1.ShardData"};
  SetServing(*server, served, false);
  // What it registers, and so what the coordinator and clients dial (and
  // what its TLS certificate must name): --advertise-host, or --host.
  const std::string address =
      absl::StrCat(flags->Get("advertise-host").value_or(host), ":", bound_port);
  int interval_ms = 1000;
  absl::StatusOr<std::string> id =
      Register(*control, address, metrics_address, **models, backend, &interval_ms);
  if (!id.ok()) {
    std::fprintf(stderr, "lact-worker: %s\n", std::string(id.status().message()).c_str());
    return 1;
  }
  SetServing(*server, served, true);
  serving = true;
  Log(LogLevel::kInfo, "started",
      {{"version", LactVersion()},
       {"worker", *id},
       {"address", address},
       {"backend", backend.backend},
       {"precision", backend.backend == "cpu" && backend.precision == "bf16"
                         ? absl::StrCat("bf16, ", CpuBf16Mode())
                         : backend.precision},
       {"metrics", metrics_address},
       {"models", (*models)->Catalog().size()}});
  std::printf("lact-worker %s listening on %s\n", id->c_str(), address.c_str());
  std::fflush(stdout);

  std::atomic<bool> stopping{false};
  absl::Mutex id_mu;
  std::string worker_id = *id;  // guarded by id_mu: a re-registration changes it
  std::thread heartbeat([&] {
    std::vector<DroppedJob> unreported;  // dropped results the coordinator has not heard of
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(interval_ms));
      v1::HeartbeatRequest request;
      {
        absl::MutexLock lock(&id_mu);
        request.set_worker_id(worker_id);
      }
      for (DroppedJob& dropped : results.TakeDropped()) unreported.push_back(std::move(dropped));
      for (const DroppedJob& dropped : unreported) {
        v1::DroppedResults* d = request.add_dropped();
        d->set_job_id(dropped.job_id);
        d->set_state(dropped.state);
      }
      v1::HeartbeatResponse response;
      const bool heard = control->Heartbeat(&ctx, request, &response).ok();
      if (heard) unreported.clear();
      if (heard && !response.known() && !stopping) {
        absl::StatusOr<std::string> again =
            Register(*control, address, metrics_address, **models, backend, &interval_ms);
        absl::MutexLock lock(&id_mu);
        if (again.ok()) worker_id = *again;
      }
    }
  });
  WaitForStopSignal();
  Log(LogLevel::kInfo, "draining", {{"drain_seconds", *drain_seconds}});
  // Drain: no new work, the coordinator and the probes told so, the running
  // shards given up to --drain-seconds to finish; then the server stops.
  service.Drain();
  SetServing(*server, served, false);
  serving = false;
  stopping = true;
  heartbeat.join();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::DeregisterRequest request;
    {
      absl::MutexLock lock(&id_mu);
      request.set_worker_id(worker_id);
    }
    v1::DeregisterResponse response;
    control->Deregister(&ctx, request, &response).IgnoreError();
  }
  if (!service.AwaitIdle(absl::Now() + absl::Seconds(*drain_seconds))) {
    Log(LogLevel::kWarn, "drain_timed_out",
        {{"drain_seconds", *drain_seconds}, {"consequence", "running shards are stopped"}});
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Log(LogLevel::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace lact

int main(int argc, char** argv) {
  lact::BlockStopSignals();
  return lact::Main(argc, argv);
}
