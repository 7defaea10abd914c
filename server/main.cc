// lact-coordinator: the public Coordinator service, and the internal
// Control service on the same port or its own (--control-port; 0 picks a
// free one). Prints "lact-coordinator listening on HOST:PORT" once ready
// (then "lact-coordinator control on HOST:PORT" for a port of its own).
// With --state-dir it takes back the jobs a coordinator before it left
// queued or running (job_recovery.h), and on SIGINT/SIGTERM hands its own
// over to the next: it stops at once, its jobs running on on their
// workers. Without, on SIGINT/SIGTERM it drains: refuses new jobs, lets
// running ones finish (up to --drain-seconds), then stops (in-flight calls
// get 10 s more). Off loopback
// it needs --auth-tokens (a file of "TENANT TOKEN" lines: clients' bearer
// tokens), --cluster-secret-file (the secret workers present) and TLS
// (--tls-cert and --tls-key: its certificate; --tls-ca: the CA that signs
// the workers' certificates, which Control then requires of its callers
// when it has a port of its own).
// Flags: Usage() below (--help).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics_endpoint.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/health.h"
#include "proto/keepalive.h"
#include "proto/tls.h"
#include "server/control_service.h"
#include "server/coordinator_metrics.h"
#include "server/coordinator_service.h"
#include "server/job_journal.h"
#include "server/job_recovery.h"

namespace lact::server {
namespace {

// What the command line says; each member's initializer (and each of
// CoordinatorOptions') is its flag's default, which the usage text shows.
struct CoordinatorFlags {
  Flags flags;
  CoordinatorOptions options;
  std::string host = "127.0.0.1";
  int64_t port = 0;
  int64_t heartbeat_ms = 1000;
  int64_t control_port = -1;  // -1: Control shares the public port
};

// --help's text.
std::string Usage() {
  const CoordinatorFlags d;
  const CoordinatorOptions& o = d.options;
  return absl::StrCat(
      "usage:\n"
      "   lact-coordinator [--host ",
      d.host, "] [--port ", d.port, "] [--heartbeat-ms ", d.heartbeat_ms,
      "]\n"
      "                    [--retain-seconds ",
      o.default_retain.count(),
      "] [--max-context-tokens N]\n"
      "                    [--collective-timeout-ms ",
      o.collective_timeout_ms,
      "] [--acquire-timeout-ms 0 (= the call's\n"
      "                    deadline)]\n"
      "                    [--max-queued-jobs ",
      o.max_queued_jobs,
      "]\n"
      "                    [--upload-idle-timeout-ms ",
      o.upload_idle_timeout.count(),
      "] [--data-root DIR]\n"
      "                    [--data-root-layout per-tenant|shared (with --auth-tokens: each "
      "tenant's\n"
      "                    files in DIR/TENANT, or all tenants in DIR; default per-tenant)]\n"
      "                    [--auth-tokens FILE] [--cluster-secret-file FILE] [--control-port N]\n"
      "                    [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]\n"
      "                    [--max-queries-per-tenant ",
      o.max_queries_per_tenant,
      " (Query calls of one tenant at once)]\n"
      "                    [--max-job-records ",
      o.max_job_records, "] [--max-workers ", o.max_workers,
      "]\n"
      "                    [--state-dir DIR (job records and running jobs kept across "
      "restarts;\n"
      "                    SIGTERM then hands the running jobs over to the next coordinator)]\n"
      "                    [--max-reruns ",
      o.max_reruns,
      " (a job whose worker is gone runs again)]\n"
      "                    [--spool-dir DIR (shared with the workers: in-band contexts kept so "
      "their\n"
      "                    jobs can run again)] [--spool-bytes ",
      o.spool_bytes,
      "]\n"
      "                    [--log-level debug|info|warn|error (JSON lines on stderr; default "
      "info)]\n"
      "                    [--metrics-port N (Prometheus text at http://HOST:N/metrics; 0 picks "
      "a\n"
      "                    free port; none by default)]\n"
      "                    [--drain-seconds ",
      o.drain_seconds,
      " (without --state-dir, on SIGTERM: no new jobs, running\n"
      "                    ones finish)]\n");
}

// Reads the flags into *o, *port and *heartbeat_ms; what they hold is each
// flag's default.
absl::Status ParseOptions(const Flags& flags, CoordinatorOptions* o, int64_t* port,
                          int64_t* heartbeat_ms) {
  LACT_ASSIGN_OR_RETURN(*port, flags.Int("port", *port, 0, 65535));
  LACT_ASSIGN_OR_RETURN(*heartbeat_ms, flags.Int("heartbeat-ms", *heartbeat_ms, 10, 60000));
  LACT_ASSIGN_OR_RETURN(
      int64_t retain, flags.Int("retain-seconds", o->default_retain.count(), 1, int64_t{1} << 31));
  LACT_ASSIGN_OR_RETURN(
      o->limits.max_context_tokens,
      flags.Int("max-context-tokens", o->limits.max_context_tokens, 1, int64_t{1} << 34));
  LACT_ASSIGN_OR_RETURN(int64_t collective,
                        flags.Int("collective-timeout-ms", o->collective_timeout_ms, 100, 3600000));
  LACT_ASSIGN_OR_RETURN(int64_t acquire, flags.Int("acquire-timeout-ms", 0, 0, int64_t{1} << 40));
  LACT_ASSIGN_OR_RETURN(int64_t queued,
                        flags.Int("max-queued-jobs", o->max_queued_jobs, 0, 1 << 20));
  o->max_queued_jobs = static_cast<int>(queued);
  LACT_ASSIGN_OR_RETURN(int64_t idle, flags.Int("upload-idle-timeout-ms",
                                                o->upload_idle_timeout.count(), 100, 3600000));
  o->upload_idle_timeout = std::chrono::milliseconds(idle);
  o->default_retain = std::chrono::seconds(retain);
  o->collective_timeout_ms = static_cast<int>(collective);
  if (acquire > 0)
    o->acquire_wait = std::chrono::milliseconds(acquire);  // 0: until the call's deadline
  o->data_root = flags.Get("data-root").value_or("");
  const std::string layout = flags.Get("data-root-layout").value_or("per-tenant");
  if (layout != "per-tenant" && layout != "shared") {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-root-layout ", layout, ": allowed per-tenant or shared"));
  }
  o->tenant_folders = layout == "per-tenant";
  LACT_ASSIGN_OR_RETURN(int64_t queries,
                        flags.Int("max-queries-per-tenant", o->max_queries_per_tenant, 1, 1 << 16));
  o->max_queries_per_tenant = static_cast<int>(queries);
  LACT_ASSIGN_OR_RETURN(o->max_job_records,
                        flags.Int("max-job-records", o->max_job_records, 1, 1 << 30));
  LACT_ASSIGN_OR_RETURN(o->max_workers, flags.Int("max-workers", o->max_workers, 1, 1 << 20));
  LACT_ASSIGN_OR_RETURN(int64_t reruns, flags.Int("max-reruns", o->max_reruns, 0, 100));
  LACT_ASSIGN_OR_RETURN(o->drain_seconds, flags.Int("drain-seconds", o->drain_seconds, 0, 86400));
  o->max_reruns = static_cast<int>(reruns);
  o->spool_dir = flags.Get("spool-dir").value_or("");
  o->keeps_jobs = flags.Has("state-dir");
  LACT_ASSIGN_OR_RETURN(o->spool_bytes,
                        flags.Int("spool-bytes", o->spool_bytes, 0, int64_t{1} << 50));
  return absl::OkStatus();
}

// A spool inside the data root would let a job name another job's spooled
// context (or overwrite it) by reference.
absl::Status CheckSpoolOutsideDataRoot(const std::string& spool, const std::string& data_root) {
  if (spool.empty() || data_root.empty()) return absl::OkStatus();
  std::error_code error;
  const std::string s = std::filesystem::weakly_canonical(spool, error).string();
  const std::string d = std::filesystem::weakly_canonical(data_root, error).string();
  if (s == d || absl::StartsWith(s, d == "/" ? d : d + "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--spool-dir ", spool, " is inside --data-root ", data_root,
        ", where jobs could read or overwrite spooled contexts by reference; put it elsewhere"));
  }
  return absl::OkStatus();
}

// What guards the coordinator's ports: tenants' tokens on the public
// service, the cluster secret on Control and toward the workers, TLS on
// both. Off loopback all are required.
struct Guards {
  TenantTokens tenants;
  std::string cluster_secret;
  TlsFiles tls;
};

absl::StatusOr<Guards> LoadGuards(const Flags& flags, const std::string& host) {
  Guards g;
  if (std::optional<std::string> path = flags.Get("auth-tokens")) {
    LACT_ASSIGN_OR_RETURN(g.tenants, TenantTokens::FromFile(*path));
  }
  if (std::optional<std::string> path = flags.Get("cluster-secret-file")) {
    LACT_ASSIGN_OR_RETURN(g.cluster_secret, ReadSecretFile(*path));
  }
  LACT_ASSIGN_OR_RETURN(g.tls, TlsFilesFromFlags(flags));
  if (!IsLoopbackHost(host) &&
      (g.tenants.open() || g.cluster_secret.empty() || !g.tls.serves_tls() || g.tls.ca.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--host ", host,
        " is not loopback: give --auth-tokens FILE (clients' bearer tokens), "
        "--cluster-secret-file FILE (what workers present), and --tls-cert, --tls-key and "
        "--tls-ca (this server's certificate and the CA of the workers'), or listen on "
        "127.0.0.1"));
  }
  return g;
}

// The credentials of the coordinator's ports and of its channels to the
// workers. The public port takes any client; Control, on a port of its
// own, only callers whose certificate the CA signed (when there is a CA).
struct PortCredentials {
  std::shared_ptr<grpc::ServerCredentials> public_port, control_port;
  std::shared_ptr<grpc::ChannelCredentials> to_workers;
};

absl::StatusOr<PortCredentials> MakePortCredentials(const TlsFiles& tls, bool control_shared) {
  PortCredentials c;
  LACT_ASSIGN_OR_RETURN(c.public_port, MakeServerCredentials(tls, false));
  LACT_ASSIGN_OR_RETURN(c.control_port,
                        MakeServerCredentials(tls, !control_shared && !tls.ca.empty()));
  LACT_ASSIGN_OR_RETURN(c.to_workers, MakeChannelCredentials(tls));
  return c;
}

// Starts a gRPC server for `services` on host:port; prints "lact-coordinator
// `what` HOST:PORT".
std::unique_ptr<grpc::Server> Serve(const std::string& host, int64_t port,
                                    const std::shared_ptr<grpc::ServerCredentials>& credentials,
                                    const std::vector<grpc::Service*>& services, const char* what) {
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port), credentials, &bound_port);
  builder.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxServerMessageBytes);
  SetKeepalive(&builder);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "lact-coordinator: cannot listen on %s:%lld\n", host.c_str(),
                 static_cast<long long>(port));
    return nullptr;
  }
  std::printf("lact-coordinator %s %s:%d\n", what, host.c_str(), bound_port);
  std::fflush(stdout);
  Log(LogLevel::kInfo, "listening",
      {{"port", what}, {"address", absl::StrCat(host, ":", bound_port)}});
  return server;
}

absl::StatusOr<CoordinatorFlags> ParseFlags(int argc, char** argv) {
  CoordinatorFlags f;
  LACT_ASSIGN_OR_RETURN(f.flags, Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                                              {"host",
                                               "port",
                                               "heartbeat-ms",
                                               "retain-seconds",
                                               "max-context-tokens",
                                               "collective-timeout-ms",
                                               "acquire-timeout-ms",
                                               "upload-idle-timeout-ms",
                                               "data-root",
                                               "data-root-layout",
                                               "max-queued-jobs",
                                               "auth-tokens",
                                               "cluster-secret-file",
                                               "control-port",
                                               "tls-cert",
                                               "tls-key",
                                               "tls-ca",
                                               "max-queries-per-tenant",
                                               "max-job-records",
                                               "max-workers",
                                               "state-dir",
                                               "max-reruns",
                                               "drain-seconds",
                                               "spool-dir",
                                               "spool-bytes",
                                               "metrics-port",
                                               "log-level"}));
  LACT_RETURN_IF_ERROR(ParseOptions(f.flags, &f.options, &f.port, &f.heartbeat_ms));
  LACT_RETURN_IF_ERROR(InitLogFromFlag("lact-coordinator", f.flags.Get("log-level")));
  f.host = f.flags.Get("host").value_or(f.host);
  LACT_ASSIGN_OR_RETURN(f.control_port, f.flags.Int("control-port", -1, -1, 65535));
  return f;
}

// The coordinator's records: the registry, the rendezvous store, the jobs
// (restored from --state-dir's journal when given) and the spool.
struct Records {
  explicit Records(const CoordinatorFlags& f)
      : registry(std::chrono::milliseconds(f.heartbeat_ms),
                 static_cast<size_t>(f.options.max_workers)),
        jobs(f.options.default_retain, static_cast<size_t>(f.options.max_job_records)),
        spool(f.options.spool_dir, f.options.spool_bytes) {}

  // Restores the journal's jobs and opens the spool.
  absl::Status Open(const CoordinatorFlags& f) {
    if (std::optional<std::string> dir = f.flags.Get("state-dir")) {
      absl::StatusOr<std::unique_ptr<JobJournal>> opened = JobJournal::Open(*dir);
      absl::Status restored = opened.ok() ? jobs.Restore(opened->get()) : opened.status();
      if (!restored.ok()) {
        return absl::Status(restored.code(),
                            absl::StrCat("--state-dir ", *dir, ": ", restored.message()));
      }
      journal = *std::move(opened);
    }
    restored = jobs.TakeRestored();
    std::set<std::string> live;
    for (const RestoredJob& job : restored) live.insert(job.info.job_id());
    LACT_RETURN_IF_ERROR(spool.Open(live));
    PrepareTakeBack(restored, &kv);
    return CheckSpoolOutsideDataRoot(f.options.spool_dir, f.options.data_root);
  }

  WorkerRegistry registry;
  KvStore kv;
  std::unique_ptr<JobJournal> journal;  // outlives the store that writes to it
  JobStore jobs;
  JobSpool spool;
  std::vector<RestoredJob> restored;  // taken back once the coordinator serves
};

// What a coordinator without --state-dir loses when it stops, said at its
// start.
void WarnNoStateDir() {
  Log(LogLevel::kWarn, "no_state_dir",
      {{"consequence",
        "job records live in this process only: a restart forgets every job, and the queued and "
        "running ones end with it (give --state-dir DIR to keep them, and the running jobs, "
        "across restarts)"}});
}

// With --state-dir, SIGTERM hands the live jobs over to the next
// coordinator on the same state: their records are written no more, and
// the process stops at once, as a crash would, so nothing it does on the
// way out ends a job (its workers hold the shards until one follows them).
[[noreturn]] void HandOver(JobStore& jobs, std::atomic<bool>* draining) {
  *draining = true;
  jobs.HandOver();
  const JobStore::Counts counts = jobs.Count();
  const auto live = [&](v1::JobInfo::Status s) {
    auto it = counts.by_status.find(s);
    return it == counts.by_status.end() ? 0 : it->second;
  };
  Log(LogLevel::kInfo, "handed_over",
      {{"running", live(v1::JobInfo::RUNNING)}, {"queued", live(v1::JobInfo::QUEUED)}});
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "lact-coordinator: %s\n", std::string(status.message()).c_str());
  return 2;
}

// Serves until SIGINT/SIGTERM, then drains: no new jobs (the probes hear
// the public service NOT_SERVING); the running ones get up to
// --drain-seconds; in-flight calls 10 s more.
int ServeUntilStopped(const CoordinatorFlags& f, const Guards& guards,
                      const PortCredentials& credentials, Records& records,
                      CoordinatorMetrics* metrics, std::atomic<bool>* serving) {
  const bool shared = f.control_port < 0;
  std::atomic<bool> draining{false};
  CallCaps queries(f.options.max_queries_per_tenant, "Query calls", "tenant",
                   "--max-queries-per-tenant");
  const CoordinatorContext c{
      &records.registry, &records.kv,
      &records.jobs,     f.options,
      &guards.tenants,   ClusterLink{credentials.to_workers, guards.cluster_secret},
      &draining,         &records.spool,
      metrics,           &queries};
  CoordinatorService coordinator(c);
  ControlService control(&records.registry, &records.kv, &records.jobs, guards.cluster_secret);
  std::unique_ptr<grpc::Server> server =
      shared
          ? Serve(f.host, f.port, credentials.public_port, {&coordinator, &control}, "listening on")
          : Serve(f.host, f.port, credentials.public_port, {&coordinator}, "listening on");
  if (!server) return 1;
  std::unique_ptr<grpc::Server> control_server;
  if (!shared) {
    control_server =
        Serve(f.host, f.control_port, credentials.control_port, {&control}, "control on");
    if (!control_server) return 1;
  }
  // Control serves the running jobs' workers to the end of a drain.
  SetServing(*server, {"lact.v1.CoordinatorService"}, true);
  *serving = true;
  SetServing(shared ? *server : *control_server, {"lact.v1.ControlService"}, true);
  Log(LogLevel::kInfo, "started",
      {{"version", LactVersion()},
       {"tls", guards.tls.serves_tls()},
       {"tokens_required", !guards.tenants.open()},
       {"spool", !f.options.spool_dir.empty()},
       {"state_dir", f.flags.Get("state-dir").value_or("")},
       {"jobs_taken_back", static_cast<int64_t>(records.restored.size())}});
  const bool hands_over = f.flags.Has("state-dir");
  if (!hands_over) WarnNoStateDir();
  TakeBackJobs(c, std::move(records.restored));
  WaitForStopSignal();
  if (hands_over) HandOver(records.jobs, &draining);
  Log(LogLevel::kInfo, "draining", {{"drain_seconds", f.options.drain_seconds}});
  draining = true;
  SetServing(*server, {"lact.v1.CoordinatorService"}, false);
  *serving = false;
  if (!records.jobs.AwaitNoLiveJobs(absl::Now() + absl::Seconds(f.options.drain_seconds))) {
    Log(LogLevel::kWarn, "drain_timed_out",
        {{"drain_seconds", f.options.drain_seconds}, {"consequence", "running jobs are stopped"}});
  }
  const auto grace = std::chrono::system_clock::now() + std::chrono::seconds(10);
  server->Shutdown(grace);
  if (control_server) control_server->Shutdown(grace);
  Log(LogLevel::kInfo, "stopped");
  return 0;
}

int Main(int argc, char** argv) {
  if (std::optional<int> answered =
          AnswerHelpOrVersion(argc, argv, "lact-coordinator", Usage().c_str()))
    return *answered;
  EnableHealthAndReflection();
  absl::StatusOr<CoordinatorFlags> f = ParseFlags(argc, argv);
  if (!f.ok()) return Fail(f.status());
  absl::StatusOr<Guards> guards = LoadGuards(f->flags, f->host);
  if (!guards.ok()) return Fail(guards.status());
  absl::StatusOr<PortCredentials> credentials =
      MakePortCredentials(guards->tls, /*control_shared=*/f->control_port < 0);
  if (!credentials.ok()) return Fail(credentials.status());
  Records records(*f);
  if (absl::Status opened = records.Open(*f); !opened.ok()) return Fail(opened);
  CoordinatorMetrics metrics(&records.jobs, &records.registry);
  std::atomic<bool> serving{false};  // what /readyz says: as lact.v1.CoordinatorService's health
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics_endpoint = MetricsEndpoint::StartIfAsked(
      f->flags, f->host, metrics.registry(), [&metrics] { metrics.Refresh(); },
      [&serving] { return serving.load(); }, "lact-coordinator");
  if (!metrics_endpoint.ok()) return Fail(metrics_endpoint.status());
  return ServeUntilStopped(*f, *guards, *credentials, records, &metrics, &serving);
}

}  // namespace
}  // namespace lact::server

int main(int argc, char** argv) {
  lact::BlockStopSignals(argv[0]);
  return lact::server::Main(argc, argv);
}
