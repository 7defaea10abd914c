// The `lact` command line: subcommands dispatch to their own files.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/cli/run_command.h"
#include "client/cli/service_commands.h"

namespace {

constexpr char kUsage[] =
    "usage: lact <command> [flags]\n"
    "commands:\n"
    "  run   run one job in this process (CPU, or one GPU with --backend cuda):\n"
    "        lact run --model PATH|preset:NAME[:SEED] --context FILE.npy|random:L[:SEED]\n"
    "                 [--query FILE.npy]... [--muon-steps N] [--chunk-tokens N]\n"
    "                 [--threads N] [--tile-tokens N] [--backend cpu|cuda] [--device N]\n"
    "                 [--precision fp32|bf16] [--scan-math fp32|tf32x3]\n"
    "                 --out FILE.safetensors\n"
    "  local   a coordinator and N workers on 127.0.0.1 until Ctrl-C:\n"
    "        lact local --workers N [--port P] [--model-dir DIR] [--threads-per-worker T]\n"
    "                   [--backend cpu|cuda] [--devices 0,1,...] [--precision fp32|bf16]\n"
    "                   [--scan-math fp32|tf32x3] [--collective gloo|nccl] [--data-root DIR]\n"
    "                   [--tls (a CA and certificate made for it; prints the CA's path)]\n"
    "                   [--no-spool (in-band contexts are not kept, so a job whose worker\n"
    "                   dies runs again only while its client is there to send them again)]\n"
    "  submit  a job to a cluster, outputs and state to a file:\n"
    "        lact submit --server ADDR --model NAME\n"
    "                    (--context FILE.npy|random:L[:SEED] | --context-ref PATH "
    "[--context-tensor NAME])\n"
    "                    [--query FILE.npy]... [--workers P] [--shards N]... [--muon-steps N]\n"
    "                    [--chunk-tokens N] [--dtype f32|bf16|f16] [--timeout S]\n"
    "                    [--out FILE.safetensors] [--out-ref PATH.npy]\n"
    "                    [--detach] [--cancel-on-disconnect] [--tenant NAME]\n"
    "        --context-ref/--out-ref name files inside the cluster's --data-root that the\n"
    "        workers read and write themselves (the context never passes through here;\n"
    "        --detach, for such jobs, returns once the job is admitted). A job runs on\n"
    "        if this command ends early, unless --cancel-on-disconnect; lact fetch\n"
    "        collects what it sent in band. --timeout (default a day) bounds the job\n"
    "  query   query sets against a finished job's retained state:\n"
    "        lact query --server ADDR --job ID --query FILE.npy... --out FILE.safetensors\n"
    "                   [--timeout S] (default an hour)\n"
    "  status  lact status --server ADDR [--job ID]\n"
    "  watch   a job's progress until it ends (exit 0 if it succeeded):\n"
    "        lact watch --server ADDR --job ID\n"
    "  fetch   a finished job's retained results (outputs sent in band, query outputs,\n"
    "          fused state) from its workers:\n"
    "        lact fetch --server ADDR --job ID --out FILE.safetensors\n"
    "  cancel  lact cancel --server ADDR --job ID\n"
    "  delete  a job and what its workers retained: lact delete --server ADDR --job ID\n"
    "  models  lact models --server ADDR\n"
    "Every command that takes --server also takes --token-file FILE (the bearer token of\n"
    "a cluster started with --auth-tokens; or $LACT_TOKEN_FILE) and --tls-ca FILE (the\n"
    "CA that signs the cluster's certificates: TLS; or $LACT_TLS_CA).\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  absl::Status status;
  using Command = absl::Status (*)(const std::vector<std::string>&);
  const std::pair<const char*, Command> commands[] = {
      {"run", lact::cli::RunCommand},       {"local", lact::cli::LocalCommand},
      {"submit", lact::cli::SubmitCommand}, {"query", lact::cli::QueryCommand},
      {"status", lact::cli::StatusCommand}, {"cancel", lact::cli::CancelCommand},
      {"watch", lact::cli::WatchCommand},   {"fetch", lact::cli::FetchCommand},
      {"delete", lact::cli::DeleteCommand}, {"models", lact::cli::ModelsCommand}};
  Command run = nullptr;
  for (const auto& [name, fn] : commands) {
    if (command == name) run = fn;
  }
  if (run != nullptr) {
    status = run(args);
  } else {
    std::fprintf(stderr, "lact: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "lact %s: %s\n", command.c_str(), std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
