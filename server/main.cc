// lact-coordinator: the public Coordinator service, and the internal
// Control service on the same port or its own (--control-port; 0 picks a
// free one). Prints "lact-coordinator listening on HOST:PORT" once ready
// (then "lact-coordinator control on HOST:PORT" for a port of its own);
// stops cleanly on SIGINT/SIGTERM (in-flight calls get 10 s). Off loopback
// it needs --auth-tokens (a file of "TENANT TOKEN" lines: clients' bearer
// tokens) and --cluster-secret-file (the secret workers present).
//   lact-coordinator [--host 127.0.0.1] [--port 0] [--heartbeat-ms 1000]
//                    [--retain-seconds 3600] [--max-context-tokens N]
//                    [--collective-timeout-ms 60000] [--acquire-timeout-ms 0 (= the call's
//                    deadline)]
//                    [--max-queued-jobs 256]
//                    [--upload-idle-timeout-ms 60000] [--data-root DIR]
//                    [--auth-tokens FILE] [--cluster-secret-file FILE] [--control-port N]
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "common/wire_limits.h"
#include "proto/auth.h"
#include "proto/keepalive.h"
#include "server/control_service.h"
#include "server/coordinator_service.h"

namespace lact::server {
namespace {

absl::Status ParseOptions(const Flags& flags, CoordinatorOptions* o, int64_t* port,
                          int64_t* heartbeat_ms) {
  LACT_ASSIGN_OR_RETURN(*port, flags.Int("port", 0, 0, 65535));
  LACT_ASSIGN_OR_RETURN(*heartbeat_ms, flags.Int("heartbeat-ms", 1000, 10, 60000));
  LACT_ASSIGN_OR_RETURN(int64_t retain, flags.Int("retain-seconds", 3600, 1, int64_t{1} << 31));
  LACT_ASSIGN_OR_RETURN(
      o->limits.max_context_tokens,
      flags.Int("max-context-tokens", o->limits.max_context_tokens, 1, int64_t{1} << 34));
  LACT_ASSIGN_OR_RETURN(int64_t collective,
                        flags.Int("collective-timeout-ms", 60000, 100, 3600000));
  LACT_ASSIGN_OR_RETURN(int64_t acquire, flags.Int("acquire-timeout-ms", 0, 0, int64_t{1} << 40));
  LACT_ASSIGN_OR_RETURN(int64_t queued, flags.Int("max-queued-jobs", 256, 0, 1 << 20));
  o->max_queued_jobs = static_cast<int>(queued);
  LACT_ASSIGN_OR_RETURN(int64_t idle, flags.Int("upload-idle-timeout-ms", 60000, 100, 3600000));
  o->upload_idle_timeout = std::chrono::milliseconds(idle);
  o->default_retain = std::chrono::seconds(retain);
  o->collective_timeout_ms = static_cast<int>(collective);
  if (acquire > 0)
    o->acquire_wait = std::chrono::milliseconds(acquire);  // 0: until the call's deadline
  o->data_root = flags.Get("data-root").value_or("");
  return absl::OkStatus();
}

// What guards the coordinator's ports: tenants' tokens on the public
// service, the cluster secret on Control and toward the workers. Off
// loopback both are required.
struct Guards {
  TenantTokens tenants;
  std::string cluster_secret;
};

absl::StatusOr<Guards> LoadGuards(const Flags& flags, const std::string& host) {
  Guards g;
  if (std::optional<std::string> path = flags.Get("auth-tokens")) {
    LACT_ASSIGN_OR_RETURN(g.tenants, TenantTokens::FromFile(*path));
  }
  if (std::optional<std::string> path = flags.Get("cluster-secret-file")) {
    LACT_ASSIGN_OR_RETURN(g.cluster_secret, ReadSecretFile(*path));
  }
  if (!IsLoopbackHost(host) && (g.tenants.open() || g.cluster_secret.empty())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--host ", host,
                     " is not loopback: give --auth-tokens FILE (clients' bearer tokens) and "
                     "--cluster-secret-file FILE (what workers present), or listen on 127.0.0.1"));
  }
  return g;
}

// Starts a gRPC server for `services` on host:port; prints "lact-coordinator
// `what` HOST:PORT".
std::unique_ptr<grpc::Server> Serve(const std::string& host, int64_t port,
                                    const std::vector<grpc::Service*>& services, const char* what) {
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &bound_port);
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
  return server;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = Flags::Parse(
      std::vector<std::string>(argv + 1, argv + argc),
      {"host", "port", "heartbeat-ms", "retain-seconds", "max-context-tokens",
       "collective-timeout-ms", "acquire-timeout-ms", "upload-idle-timeout-ms", "data-root",
       "max-queued-jobs", "auth-tokens", "cluster-secret-file", "control-port"});
  CoordinatorOptions options;
  int64_t port = 0, heartbeat_ms = 1000;
  absl::Status parsed =
      flags.ok() ? ParseOptions(*flags, &options, &port, &heartbeat_ms) : flags.status();
  const std::string host = flags.ok() ? flags->Get("host").value_or("127.0.0.1") : "";
  absl::StatusOr<Guards> guards = parsed.ok() ? LoadGuards(*flags, host) : parsed;
  absl::StatusOr<int64_t> control_port =
      guards.ok() ? flags->Int("control-port", -1, -1, 65535) : guards.status();
  if (!control_port.ok()) {
    std::fprintf(stderr, "lact-coordinator: %s\n",
                 std::string(control_port.status().message()).c_str());
    return 2;
  }
  WorkerRegistry registry{std::chrono::milliseconds(heartbeat_ms)};
  KvStore kv;
  JobStore jobs(options.default_retain);
  CoordinatorService coordinator(
      Coordinator{&registry, &kv, &jobs, options, &guards->tenants,
                  ClusterLink{grpc::InsecureChannelCredentials(), guards->cluster_secret}});
  ControlService control(&registry, &kv, &jobs, guards->cluster_secret);
  // Control shares the public port unless it has its own (--control-port).
  const bool shared = *control_port < 0;
  std::unique_ptr<grpc::Server> server =
      shared ? Serve(host, port, {&coordinator, &control}, "listening on")
             : Serve(host, port, {&coordinator}, "listening on");
  if (!server) return 1;
  std::unique_ptr<grpc::Server> control_server;
  if (!shared) {
    control_server = Serve(host, *control_port, {&control}, "control on");
    if (!control_server) return 1;
  }
  WaitForStopSignal();
  const auto grace = std::chrono::system_clock::now() + std::chrono::seconds(10);
  server->Shutdown(grace);
  if (control_server) control_server->Shutdown(grace);
  return 0;
}

}  // namespace
}  // namespace lact::server

int main(int argc, char** argv) {
  lact::BlockStopSignals();
  return lact::server::Main(argc, argv);
}
