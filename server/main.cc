// lact-coordinator: the public Coordinator service and the internal Control
// service on one port. Prints "lact-coordinator listening on HOST:PORT" once
// ready; stops cleanly on SIGINT/SIGTERM (in-flight calls get 10 s).
//   lact-coordinator [--host 127.0.0.1] [--port 0] [--heartbeat-ms 1000]
//                    [--retain-seconds 3600] [--max-context-tokens N]
//                    [--collective-timeout-ms 60000] [--acquire-timeout-ms 0 (= the call's
//                    deadline)]
//                    [--max-queued-jobs 256]
//                    [--upload-idle-timeout-ms 60000] [--data-root DIR]
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "common/wire_limits.h"
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

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags =
      Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                   {"host", "port", "heartbeat-ms", "retain-seconds", "max-context-tokens",
                    "collective-timeout-ms", "acquire-timeout-ms", "upload-idle-timeout-ms",
                    "data-root", "max-queued-jobs"});
  CoordinatorOptions options;
  int64_t port = 0, heartbeat_ms = 1000;
  absl::Status parsed =
      flags.ok() ? ParseOptions(*flags, &options, &port, &heartbeat_ms) : flags.status();
  if (!parsed.ok()) {
    std::fprintf(stderr, "lact-coordinator: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  const std::string host = flags->Get("host").value_or("127.0.0.1");
  WorkerRegistry registry{std::chrono::milliseconds(heartbeat_ms)};
  KvStore kv;
  JobStore jobs(options.default_retain);
  CoordinatorService coordinator(Coordinator{&registry, &kv, &jobs, options});
  ControlService control(&registry, &kv);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port), grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.SetMaxReceiveMessageSize(kMaxServerMessageBytes);
  builder.SetMaxSendMessageSize(kMaxServerMessageBytes);
  builder.RegisterService(&coordinator);
  builder.RegisterService(&control);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "lact-coordinator: cannot listen on %s:%lld\n", host.c_str(),
                 static_cast<long long>(port));
    return 1;
  }
  std::printf("lact-coordinator listening on %s:%d\n", host.c_str(), bound_port);
  std::fflush(stdout);
  WaitForStopSignal();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return 0;
}

}  // namespace
}  // namespace lact::server

int main(int argc, char** argv) {
  lact::BlockStopSignals();
  return lact::server::Main(argc, argv);
}
