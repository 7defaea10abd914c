// The `lact` command line: subcommands dispatch to their own files. Every
// subcommand answers --help and -h with its own usage (stdout, exit 0);
// `lact --help` lists them all, `lact --version` prints the build's version.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/cli/exit_status.h"
#include "client/cli/run_command.h"
#include "client/cli/service_commands.h"
#include "common/flags.h"
#include "common/malloc_policy.h"

namespace {

using Command = absl::Status (*)(const std::vector<std::string>&);

struct Subcommand {
  const char* name;
  Command run;
  const char* usage;  // what it does, then its flags
};

constexpr Subcommand kCommands[] = {
    {"run", lact::cli::ExecRun, lact::cli::kRunUsage},
    {"local", lact::cli::LocalCommand,
     "  local   a coordinator and N workers on 127.0.0.1 until Ctrl-C:\n"
     "        lact local --workers N [--port P] [--model-dir DIR] [--threads-per-worker T]\n"
     "                   [--backend cpu|cuda] [--devices 0,1,...] [--precision fp32|bf16]\n"
     "                   [--scan-math fp32|tf32x3|bf16 (default bf16 in bf16 precision where\n"
     "                   the model allows, else fp32)] [--collective gloo|nccl] [--data-root DIR]\n"
     "                   [--tls (a CA and certificate made for it; prints the CA's path)]\n"
     "                   [--auth-tokens FILE (lines TENANT TOKEN: clients must present one)]\n"
     "                   [--no-spool (in-band contexts are not kept, so a job whose worker\n"
     "                   dies runs again only while its client is there to send them again)]\n"
     "                   [--warm-bytes N (each worker touches N bytes of heap before it takes\n"
     "                   work, so the first job's buffers are warm pages; default 0)]\n"},
    {"submit", lact::cli::SubmitCommand,
     "  submit  a job to a cluster, outputs and state to a file:\n"
     "        lact submit --server ADDR --model NAME\n"
     "                    (--context FILE.npy|random:L[:SEED] | --context-ref PATH "
     "[--context-tensor NAME])\n"
     "                    [--query FILE.npy]... [--workers P] [--shards N]... [--muon-steps N]\n"
     "                    [--chunk-tokens N] [--dtype f32|bf16|f16] [--timeout S]\n"
     "                    [--out FILE.safetensors] [--out-ref PATH.npy [--replace]]\n"
     "                    [--detach] [--cancel-on-disconnect] [--tenant NAME]\n"
     "        --context-ref/--out-ref name files inside the cluster's --data-root that the\n"
     "        workers read and write themselves (the context never passes through here;\n"
     "        an --out-ref that exists is replaced only with --replace;\n"
     "        --detach, for such jobs, returns once the job is admitted). --out is written\n"
     "        as the outputs arrive, as FILE.safetensors.partial until complete. A job runs on\n"
     "        if this command ends early, unless --cancel-on-disconnect; lact fetch\n"
     "        collects what it sent in band. --timeout (default a day) bounds the job\n"},
    {"query", lact::cli::QueryCommand,
     "  query   query sets against a finished job's retained state:\n"
     "        lact query --server ADDR --job ID --query FILE.npy... --out FILE.safetensors\n"
     "                   [--dtype f32|bf16|f16 (the query tokens' wire type)]\n"
     "                   [--timeout S] (default an hour)\n"},
    {"status", lact::cli::StatusCommand,
     "  status  one job, or every job of this tenant:\n"
     "        lact status --server ADDR [--job ID]\n"},
    {"watch", lact::cli::WatchCommand,
     "  watch   a job's progress until it ends (exit 0 if it succeeded):\n"
     "        lact watch --server ADDR --job ID\n"},
    {"fetch", lact::cli::FetchCommand,
     "  fetch   a finished job's retained results (outputs sent in band, query outputs,\n"
     "          fused state) from its workers:\n"
     "        lact fetch --server ADDR --job ID --out FILE.safetensors\n"},
    {"cancel", lact::cli::CancelCommand,
     "  cancel  a running job:\n"
     "        lact cancel --server ADDR --job ID\n"},
    {"delete", lact::cli::DeleteCommand,
     "  delete  a job and what its workers retained:\n"
     "        lact delete --server ADDR --job ID\n"},
    {"models", lact::cli::ModelsCommand,
     "  models  the models the healthy workers hold:\n"
     "        lact models --server ADDR\n"},
    {"workers", lact::cli::WorkersCommand,
     "  workers every worker the coordinator knows: address, backend, health, lease,\n"
     "          seconds since its last heartbeat, models:\n"
     "        lact workers --server ADDR\n"},
};

constexpr char kServerFlags[] =
    "Every command that takes --server also takes --token-file FILE (the bearer token of\n"
    "a cluster started with --auth-tokens; or $LACT_TOKEN_FILE) and --tls-ca FILE (the\n"
    "CA that signs the cluster's certificates: TLS; or $LACT_TLS_CA).\n";

constexpr char kJsonFlag[] =
    "Every command but local also takes --json: its summary as one JSON object on stdout\n"
    "(records in proto3's JSON mapping, .proto field names; progress stays on stderr).\n";

void PrintUsage(FILE* out) {
  std::fputs("usage: lact <command> [flags]   (lact <command> --help; lact --version)\n", out);
  std::fputs("commands:\n", out);
  for (const Subcommand& c : kCommands) std::fputs(c.usage, out);
  std::fputs(kServerFlags, out);
  std::fputs(kJsonFlag, out);
}

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h" || arg == "help"; }

}  // namespace

int main(int argc, char** argv) {
  lact::KeepFreedMemory();  // a job's outputs arrive in many large messages
  if (argc < 2 || IsHelp(argv[1])) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
    std::printf("lact %s\n", lact::LactVersion());
    return 0;
  }
  const Subcommand* found = nullptr;
  for (const Subcommand& c : kCommands) {
    if (command == c.name) found = &c;
  }
  if (found == nullptr) {
    std::fprintf(stderr, "lact: unknown command '%s'\n", command.c_str());
    PrintUsage(stderr);
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const std::string& arg : args) {
    if (IsHelp(arg) && arg != "help") {
      std::printf("usage:\n%s", found->usage);
      if (std::strstr(found->usage, "--server") != nullptr) std::fputs(kServerFlags, stdout);
      if (std::strcmp(found->name, "local") != 0) std::fputs(kJsonFlag, stdout);
      return 0;
    }
  }
  const absl::Status status = found->run(args);
  if (!status.ok()) {
    std::fprintf(stderr, "lact %s: %s\n", command.c_str(), std::string(status.message()).c_str());
    return lact::cli::ExitStatus(status);
  }
  return 0;
}
