// The data path alone: how fast a job's bytes move in and out of a local
// 2-worker cluster, in band (client <-> workers over ShardDataService.Transfer)
// and by reference (workers read the context file, write the output file),
// for a 1 GiB float32 context of width 256 and a 3 GiB one of width 768.
// The model is a deliberately cheap one of the same widths (d_model 16, one
// layer), so the job is nearly all data movement; the figures come from the
// job's own statistics (upload and download phases, timed on the workers),
// next to this machine's single-core memcpy rate measured in the same run.
// With --model preset:small it runs that model instead (at 1,048,576
// tokens, the main job's data path: job time minus the slowest worker's
// compute).
//   bench_data_path [--tokens N] [--model NAME] [--widths 256,768] [--reps N]
//                   [--only 256band|256ref|768band|768ref] [--dir DIR] [--json FILE]
//                   [--malloc-default (the client keeps glibc's defaults)]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/data_files.h"
#include "common/flags.h"
#include "common/malloc_policy.h"
#include "common/model.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace lact {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Single-core memcpy bandwidth over 256 MiB buffers, best of 3 (GB/s).
double MemcpyGBps() {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::max(best, bytes / 1e9 / Seconds(t0, Clock::now()));
  }
  return best + (b[bytes / 2] == 3 ? 1e-9 : 0);  // keeps the copy observable
}

absl::Status WriteCheapModel(const std::string& path, int width) {
  const ModelConfig c{.d_model = 16,
                      .n_layers = 1,
                      .d_input = width,
                      .d_output = width,
                      .ssm = {.head_dim = 16, .d_state = 8},
                      .ttt = {.head_dim = 16},
                      .mlp_hidden = 32};
  LACT_ASSIGN_OR_RETURN(Model model, MakeRandomModel(c, 1));
  SafetensorsWriter writer;
  for (const auto& [name, t] : model.tensors()) writer.Add(name, t);
  writer.SetMetadata("lact.config", ModelConfigToJson(c));
  return writer.Write(path);
}

// A float32 .npy of `tokens` x `width` normal values, written in blocks.
absl::Status WriteContext(const std::string& path, int64_t tokens, int64_t width) {
  LACT_RETURN_IF_ERROR(CreateOutputFile(DataPath::Split(path), tokens, width, true).status());
  const int64_t block = 65536;
  Tensor rows({block, width});
  Random rng(width);
  for (int64_t r = 0; r < tokens; r += block) {
    const int64_t n = std::min(block, tokens - r);
    for (int64_t i = 0; i < n * width; ++i)
      rows.data[i] = static_cast<float>(2 * rng.Uniform() - 1);
    LACT_RETURN_IF_ERROR(WriteTokenRows(DataPath::Split(path), tokens, width, r, rows.ptr(), n));
  }
  return absl::OkStatus();
}

struct Result {
  std::string name;
  double gib, job_s, compute_s, in_s, in_mbps, out_s, out_mbps, client_s;
  int64_t coordinator_rss, payload;
};

absl::StatusOr<Result> RunOne(LactClient& client, const std::string& model, const std::string& name,
                              int width, const std::string& context_path,
                              const std::string& out_path, bool by_ref) {
  SubmitOptions o;
  o.model = model.empty() ? absl::StrCat("io", width) : model;
  o.workers = 2;
  o.return_state = false;
  Tensor tensor;
  if (by_ref) {
    // The second rep rewrites the first's file.
    o.output = OutputTarget::File({out_path, "", /*replace=*/true});
  } else {
    LACT_ASSIGN_OR_RETURN(tensor,
                          ReadNpy(context_path));  // before the clock: the client's own input
  }
  const ContextInput context = by_ref ? ContextInput::File({context_path}) : ContextInput(tensor);
  const auto t0 = Clock::now();
  LACT_ASSIGN_OR_RETURN(JobResult r, client.Submit(o, context, {}));
  const double client_s = Seconds(t0, Clock::now());
  const v1::JobStats& s = r.stats;
  int64_t tokens = 0;
  for (const v1::ShardRange& shard : r.shards) tokens += shard.tokens();
  return Result{name,
                tokens * width * 4 / double(1 << 30),
                s.seconds(),
                s.compute_seconds(),
                s.upload_seconds(),
                s.upload_mb_per_second(),
                s.download_seconds(),
                s.download_mb_per_second(),
                client_s,
                s.coordinator_peak_rss_bytes(),
                s.coordinator_payload_bytes()};
}

// A cluster's kind: with --tls, every job runs again on a cluster with TLS
// on every port (the cost of TLS, measured in the same run); with
// --no-spool, on one that does not spool in-band contexts (the cost of the
// spool); with --no-huge-pages, on one whose workers receive into 4 KiB
// pages.
struct Mode {
  const char* label;
  bool tls, spool, huge_pages;
};

std::vector<Mode> Modes(const Flags& flags) {
  std::vector<Mode> modes = {{"", false, true, true}};
  if (flags.Has("no-spool")) modes.push_back({"unspooled ", false, false, true});
  if (flags.Has("no-huge-pages")) modes.push_back({"4k-pages ", false, true, false});
  if (flags.Has("tls")) modes.push_back({"tls ", true, true, true});
  return modes;
}

// What every job reads: the models and contexts of each width.
struct Setup {
  std::string dir, model, only;
  std::vector<int> widths;
  int64_t tokens = 0;
  int reps = 0;
};

absl::Status WriteInputs(const Setup& setup) {
  fs::create_directories(setup.dir + "/models");
  fs::create_directories(setup.dir + "/root");
  for (int width : setup.widths) {
    LACT_RETURN_IF_ERROR(
        WriteCheapModel(absl::StrCat(setup.dir, "/models/io", width, ".safetensors"), width));
    LACT_RETURN_IF_ERROR(
        WriteContext(absl::StrCat(setup.dir, "/root/context", width, ".npy"), setup.tokens, width));
  }
  return absl::OkStatus();
}

void PrintRow(const Result& r) {
  std::printf("%-30s %6.2f %8.2f %8.2f %8.2f %9.0f %8.2f %9.0f %9.2f %6lldMi %8lld\n",
              r.name.c_str(), r.gib, r.job_s, r.compute_s, r.in_s, r.in_mbps, r.out_s, r.out_mbps,
              r.job_s - r.compute_s, static_cast<long long>(r.coordinator_rss >> 20),
              static_cast<long long>(r.payload));
  std::fflush(stdout);
}

// Every width's jobs, in band and by reference, on a cluster of `mode`.
absl::Status RunMode(const Mode& mode, const Setup& setup, std::vector<Result>* results) {
  LocalClusterOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  options.model_dir = setup.dir + "/models";
  options.data_root = setup.dir + "/root";
  options.tls = mode.tls;
  options.spool = mode.spool;
  if (!mode.huge_pages) options.worker_args.push_back("--no-huge-pages");
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  sync();  // the context files' writeback would otherwise compete with the first jobs' writes
  LactClient client(cluster->address(), cluster->security());
  for (int width : setup.widths) {
    const std::string context = absl::StrCat(setup.dir, "/root/context", width, ".npy");
    const std::string out = absl::StrCat(setup.dir, "/root/out", width, ".npy");
    for (bool by_ref : {false, true}) {
      if (!setup.only.empty() && setup.only != absl::StrCat(width, by_ref ? "ref" : "band"))
        continue;
      for (int rep = 0; rep < setup.reps; ++rep) {
        const std::string name = absl::StrCat(mode.label, "w", width,
                                              by_ref ? " by reference" : " in band", " #", rep + 1);
        absl::StatusOr<Result> r = RunOne(client, setup.model, name, width, context, out, by_ref);
        if (!r.ok())
          return absl::Status(r.status().code(), absl::StrCat(name, ": ", r.status().message()));
        PrintRow(*r);
        results->push_back(*r);
      }
    }
  }
  return absl::OkStatus();
}

void WriteJson(const std::string& path, double memcpy_gbps, const Setup& setup,
               const std::vector<Result>& results) {
  std::ofstream f(path);
  f << "{\n  \"memcpy_gb_per_s\": " << memcpy_gbps << ",\n  \"tokens\": " << setup.tokens
    << ",\n  \"model\": \""
    << (setup.model.empty() ? "io<width> (d_model 16, 1 layer)" : setup.model)
    << "\",\n  \"jobs\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    f << absl::StrFormat(
        "    {\"job\": \"%s\", \"gib\": %.3f, \"job_s\": %.3f, \"compute_s\": %.3f, \"in_s\": "
        "%.3f, \"in_mb_per_s\": %.0f, \"out_s\": %.3f, \"out_mb_per_s\": %.0f, \"overhead_s\": "
        "%.3f, \"in_vs_memcpy\": %.3f, \"coordinator_peak_rss_mib\": %lld, "
        "\"coordinator_payload_bytes\": %lld}%s\n",
        r.name, r.gib, r.job_s, r.compute_s, r.in_s, r.in_mbps, r.out_s, r.out_mbps,
        r.job_s - r.compute_s, r.in_mbps / 1e3 / memcpy_gbps,
        static_cast<long long>(r.coordinator_rss >> 20), static_cast<long long>(r.payload),
        i + 1 < results.size() ? "," : "");
  }
  f << "  ]\n}\n";
}

int Fail(const absl::Status& status, int code = 1) {
  std::fprintf(stderr, "bench_data_path: %s\n", std::string(status.message()).c_str());
  return code;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags =
      Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                   {"tokens", "dir", "json", "only", "model", "widths", "reps", "tls", "no-spool",
                    "no-huge-pages", "malloc-default"},
                   {}, {"tls", "no-spool", "no-huge-pages", "malloc-default"});
  if (!flags.ok()) return Fail(flags.status(), 2);
  // As the `lact` client does, unless asked for glibc's defaults (to compare).
  if (!flags->Has("malloc-default")) KeepFreedMemory();
  Setup setup;
  setup.tokens = flags->Int("tokens", 1 << 20, 1, int64_t{1} << 26).value_or(1 << 20);
  setup.reps = static_cast<int>(flags->Int("reps", 2, 1, 100).value_or(2));
  setup.model = flags->Get("model").value_or("");
  setup.only = flags->Get("only").value_or("");
  for (absl::string_view w : absl::StrSplit(flags->Get("widths").value_or("256,768"), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(w, &v) && v > 0) setup.widths.push_back(v);
  }
  setup.dir = flags->Get("dir").value_or(absl::StrCat("/tmp/lact_bench_data_", getpid()));
  const double memcpy_gbps = MemcpyGBps();
  std::fprintf(stderr, "memcpy (1 core): %.2f GB/s\n", memcpy_gbps);
  if (absl::Status s = WriteInputs(setup); !s.ok()) return Fail(s);
  std::vector<Result> results;
  std::printf("%-30s %6s %8s %8s %8s %9s %8s %9s %9s %8s %8s\n", "job", "GiB", "job s", "compute",
              "in s", "in MB/s", "out s", "out MB/s", "overhead", "coord", "payload");
  for (const Mode& mode : Modes(*flags)) {
    if (absl::Status s = RunMode(mode, setup, &results); !s.ok()) return Fail(s);
  }
  if (std::optional<std::string> json = flags->Get("json")) {
    WriteJson(*json, memcpy_gbps, setup, results);
  }
  fs::remove_all(setup.dir);
  return 0;
}

}  // namespace
}  // namespace lact

int main(int argc, char** argv) { return lact::Main(argc, argv); }
