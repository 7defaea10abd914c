#include "client/cli/service_commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/json_output.h"
#include "client/cli/output_file.h"
#include "client/cli/result_file.h"
#include "client/cli/tokens_source.h"
#include "client/lact_client.h"
#include "client/local_cluster.h"
#include "common/flags.h"
#include "common/malloc_policy.h"
#include "common/model_config.h"
#include "common/peak_rss.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/stop_signals.h"
#include "proto/auth.h"
#include "proto/job_options.h"
#include "proto/tls.h"

namespace lact::cli {
namespace {

// The file a flag names, or the environment variable that stands in for it.
std::optional<std::string> FlagOrEnv(const Flags& flags, const char* flag, const char* env) {
  if (std::optional<std::string> value = flags.Get(flag)) return value;
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') return std::string(v);
  return std::nullopt;
}

// How long a command waits for the coordinator's channel before it gives
// up naming the address.
constexpr std::chrono::seconds kReachTimeout(5);

// A client of `server` presenting the token of --token-file (or
// $LACT_TOKEN_FILE) and trusting the CA of --tls-ca (or $LACT_TLS_CA):
// TLS then, plaintext without. UNAVAILABLE naming `server` when nothing
// answers there within kReachTimeout.
absl::StatusOr<LactClient> Connect(const Flags& flags, const std::string& server) {
  ClientSecurity security;
  if (std::optional<std::string> path = FlagOrEnv(flags, "token-file", "LACT_TOKEN_FILE")) {
    LACT_ASSIGN_OR_RETURN(security.token, ReadSecretFile(*path));
  }
  if (std::optional<std::string> path = FlagOrEnv(flags, "tls-ca", "LACT_TLS_CA")) {
    LACT_ASSIGN_OR_RETURN(security.tls_roots, ReadPem(*path, "--tls-ca"));
  }
  LactClient client(server, security);
  LACT_RETURN_IF_ERROR(client.WaitUntilReachable(kReachTimeout));
  return client;
}

// One line, rewritten in place on a terminal; every few seconds otherwise.
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(STDERR_FILENO)) {}
  void Update(const v1::Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ && now - last_ < std::chrono::seconds(5) && p.stage() != v1::Progress::QUERIES &&
        p.stage() != v1::Progress::QUEUED && p.stage() != v1::Progress::COORDINATOR_AWAY) {
      return;
    }
    last_ = now;
    std::string text;
    if (p.stage() == v1::Progress::UPLOAD) {
      const double frac =
          p.tokens_total() > 0 ? static_cast<double>(p.tokens_done()) / p.tokens_total() : 0;
      text = absl::StrFormat("upload %5.1f%% (%d/%d tokens)", 100 * frac, p.tokens_done(),
                             p.tokens_total());
    } else if (p.stage() == v1::Progress::LAYERS) {
      const double rate =
          p.tokens_total() * p.layers_done() / std::max(1e-9, p.elapsed_seconds() - upload_end_);
      const double eta =
          (p.layers_total() - p.layers_done()) * p.tokens_total() / std::max(1e-9, rate);
      text = absl::StrFormat("layer %d/%d  %.0f tokens/s per layer  ETA %.0f s", p.layers_done(),
                             p.layers_total(), rate, eta);
    } else if (p.stage() == v1::Progress::QUERIES) {
      text = "running query sets";
    } else if (p.stage() == v1::Progress::QUEUED) {
      text = absl::StrFormat("queued for workers: %s",
                             p.queue_position() == 1
                                 ? std::string("next in line")
                                 : absl::StrCat(p.queue_position() - 1, " jobs ahead"));
    } else if (p.stage() == v1::Progress::COORDINATOR_AWAY) {
      text = "waiting for the coordinator (it went away; the job runs on on its workers)";
    }
    if (p.stage() == v1::Progress::UPLOAD) upload_end_ = p.elapsed_seconds();
    std::fprintf(stderr, tty_ ? "\r\033[K[%6.1f s] %s" : "[%6.1f s] %s\n", p.elapsed_seconds(),
                 text.c_str());
    std::fflush(stderr);
  }
  void Finish() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  double upload_end_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

// The effective config of a job of `config` with `options`, as a result
// file records it (lact.config). Callers take the model's config before the
// job runs: by the time results are in, the coordinator may be gone.
absl::StatusOr<std::string> JobConfigJson(const ModelConfig& config, const JobOptions& options) {
  LACT_ASSIGN_OR_RETURN(ModelConfig effective, ApplyJobOptions(config, options));
  return ModelConfigToJson(effective);
}

// `output` null: no "output" tensor (a query's results).
absl::Status WriteResult(const std::string& path, const std::string& config_json,
                         const Tensor* output, const std::vector<Tensor>& queries,
                         const std::map<std::string, Tensor>& state) {
  SafetensorsWriter writer;
  writer.SetMetadata("lact.config", config_json);
  if (output != nullptr) writer.Add("output", *output);
  for (size_t k = 0; k < queries.size(); ++k) writer.Add(absl::StrCat("query_", k), queries[k]);
  for (const auto& [name, t] : state) writer.Add(name, t);
  return writer.Write(path);
}

void PrintStats(const v1::JobStats& s, int64_t context_tokens) {
  // Outputs that stream while the last layer runs: the window they flowed
  // in, and how long they took once the compute was done.
  const std::string out =
      s.output_seconds() > 0
          ? absl::StrFormat(
                "out over %.2f s as the last layer made them (%.0f MB/s), the last "
                "%.2f s after the compute",
                s.output_seconds(), s.download_mb_per_second(), s.download_seconds())
          : absl::StrFormat("out %.2f s (%.0f MB/s)", s.download_seconds(),
                            s.download_mb_per_second());
  std::fprintf(
      stderr,
      "  %lld context tokens in %.2f s = %.0f tokens/s (compute %.2f s on the slowest worker)\n"
      "  data: in %.2f s (%.0f MB/s), %s; %lld payload bytes through the coordinator\n"
      "  gradient all-reduce %.3f s, %.0f%% hidden behind the scans\n",
      static_cast<long long>(context_tokens), s.seconds(), s.tokens_per_second(),
      s.compute_seconds(), s.upload_seconds(), s.upload_mb_per_second(), out.c_str(),
      static_cast<long long>(s.coordinator_payload_bytes()), s.allreduce_seconds(),
      100 * s.allreduce_hidden_fraction());
  std::string rss;
  for (int64_t b : s.worker_peak_rss_bytes())
    absl::StrAppend(&rss, rss.empty() ? "" : ", ", b >> 20, " MiB");
  std::fprintf(stderr, "  peak RSS: coordinator %lld MiB; workers %s; this client %lld MiB\n",
               static_cast<long long>(s.coordinator_peak_rss_bytes() >> 20), rss.c_str(),
               static_cast<long long>(PeakRssBytes() >> 20));
  std::string idle;
  for (double seconds : s.worker_idle_seconds())
    absl::StrAppend(&idle, idle.empty() ? "" : ", ", absl::StrFormat("%.3f s", seconds));
  if (!idle.empty()) {
    std::fprintf(stderr, "  workers idle before its compute (since the one before it): %s\n",
                 idle.c_str());
  }
}

// --json of a listing: {"<key>": [message, ...]}.
template <typename Message>
absl::Status PrintMessages(const char* key, const std::vector<Message>& messages) {
  nlohmann::json list = nlohmann::json::array();
  for (const Message& m : messages) {
    LACT_ASSIGN_OR_RETURN(nlohmann::json one, ProtoToJson(m));
    list.push_back(std::move(one));
  }
  PrintJson({{key, list}});
  return absl::OkStatus();
}

// The job lact submit sends, as its flags say; the context and query sets
// are read later, once the model's width is known.
absl::StatusOr<SubmitOptions> SubmitOptionsFromFlags(const Flags& flags) {
  SubmitOptions options;
  LACT_ASSIGN_OR_RETURN(options.model, flags.Required("model"));
  const std::string out_ref = flags.Get("out-ref").value_or("");
  if (!out_ref.empty()) options.output = OutputTarget::File({out_ref, "", flags.Has("replace")});
  options.detach = flags.Has("detach");
  // A detached command is not there to take the fused state in band: the
  // workers keep it (lact fetch and lact query reach it).
  if (options.detach) options.return_state = false;
  options.cancel_on_disconnect = flags.Has("cancel-on-disconnect");
  options.tenant = flags.Get("tenant").value_or("");
  if (flags.Get("context").value_or("").empty() == flags.Get("context-ref").value_or("").empty()) {
    return absl::InvalidArgumentError(
        "give the context as --context FILE.npy|random:L[:SEED] or --context-ref PATH");
  }
  const std::string out_path = flags.Get("out").value_or("");
  if (out_path.empty() && out_ref.empty()) {
    return absl::InvalidArgumentError("give --out FILE.safetensors, --out-ref PATH.npy, or both");
  }
  if (!out_path.empty()) LACT_RETURN_IF_ERROR(CheckOutputFile("out", out_path));
  LACT_ASSIGN_OR_RETURN(int64_t workers, flags.Int("workers", 0, 0, 4096));
  LACT_ASSIGN_OR_RETURN(std::optional<int64_t> muon, flags.OptionalInt("muon-steps", 0, 100));
  LACT_ASSIGN_OR_RETURN(std::optional<int64_t> chunk,
                        flags.OptionalInt("chunk-tokens", 0, int64_t{1} << 30));
  LACT_ASSIGN_OR_RETURN(int64_t timeout_s, flags.Int("timeout", 0, 0, int64_t{1} << 31));
  LACT_ASSIGN_OR_RETURN(options.dtype,
                        WireTypeNamed(flags.Get("dtype").value_or("f32"), "--dtype"));
  options.workers = static_cast<int>(workers);
  if (muon) options.options.muon_steps = static_cast<int>(*muon);
  if (chunk) options.options.chunk_tokens = static_cast<int>(*chunk);
  options.timeout = std::chrono::seconds(timeout_s);
  for (const std::string& s : flags.GetAll("shards")) {
    int64_t n;
    if (!absl::SimpleAtoi(s, &n))
      return absl::InvalidArgumentError(absl::StrCat("--shards '", s, "' is not an integer"));
    options.shard_tokens.push_back(n);
  }
  return options;
}

// What a finished lact submit prints: the job's id on stdout, and its
// outputs and statistics on stderr (or all of it as --json).
absl::Status PrintSubmitted(const Flags& flags, const SubmitOptions& options,
                            const JobResult& result) {
  const std::string out_path = flags.Get("out").value_or("");
  const std::string out_ref = flags.Get("out-ref").value_or("");
  int64_t tokens = 0;
  for (const v1::ShardRange& r : result.shards) tokens += r.tokens();
  if (flags.Has("json")) {
    LACT_ASSIGN_OR_RETURN(nlohmann::json stats, ProtoToJson(result.stats));
    PrintJson({{"job_id", result.job_id},
               {"status", "SUCCEEDED"},
               {"model", options.model},
               {"workers", result.shards.size()},
               {"context_tokens", tokens},
               {"query_sets", result.queries.size()},
               {"state_tensors", result.state.size()},
               {"out", out_path},
               {"out_ref", out_ref},
               {"stats", stats},
               {"client_peak_rss_bytes", PeakRssBytes()}});
    return absl::OkStatus();
  }
  std::printf("%s\n", result.job_id.c_str());
  std::fprintf(stderr, "lact submit: job %s done on %zu workers; wrote %s\n", result.job_id.c_str(),
               result.shards.size(),
               out_path.empty()  ? out_ref.c_str()
               : out_ref.empty() ? out_path.c_str()
                                 : (out_path + " and " + out_ref).c_str());
  PrintStats(result.stats, tokens);
  return absl::OkStatus();
}

// The context: --context-ref, the file by reference; --context random:...,
// rows made as they are sent; --context FILE, read whole into *tensor.
absl::StatusOr<ContextInput> SubmitContext(const Flags& flags, int64_t width, Tensor* tensor) {
  const std::string spec = flags.Get("context").value_or("");
  if (spec.empty()) {
    return ContextInput::File(
        {flags.Get("context-ref").value_or(""), flags.Get("context-tensor").value_or("")});
  }
  LACT_ASSIGN_OR_RETURN(std::optional<ContextSource> made, RandomContextSource(spec, width));
  if (made) return ContextInput::Source(*std::move(made));
  LACT_ASSIGN_OR_RETURN(*tensor, LoadTokens(spec, width));
  return ContextInput(*tensor);
}

// --out, written as the outputs arrive (options->output), for the outputs
// in band of a context sent in band; null otherwise (WriteResult writes it
// once the job is done).
absl::StatusOr<std::unique_ptr<StreamedResultFile>> StreamedOut(
    const std::string& out_path, const ModelConfig& config,
    const absl::StatusOr<std::string>& config_json, const ContextInput& context,
    const std::vector<Tensor>& queries, SubmitOptions* options) {
  if (out_path.empty() || !options->output.in_band() || context.file() != nullptr ||
      options->detach) {
    return nullptr;
  }
  const int64_t context_tokens = context.tokens();
  LACT_RETURN_IF_ERROR(config_json.status());
  LACT_ASSIGN_OR_RETURN(ModelConfig effective, ApplyJobOptions(config, options->options));
  std::vector<int64_t> query_tokens;
  for (const Tensor& q : queries) query_tokens.push_back(q.dim(0));
  LACT_ASSIGN_OR_RETURN(
      std::unique_ptr<StreamedResultFile> file,
      StreamedResultFile::Create(out_path, *config_json, effective, context_tokens, query_tokens,
                                 options->return_state));
  options->output = OutputTarget::Rows(file->Sink());
  return file;
}

void PrintDetached(const Flags& flags, const std::string& server, const JobResult& result) {
  if (flags.Has("json")) {
    PrintJson({{"job_id", result.job_id}, {"detached", true}});
  } else {
    std::printf("%s\n", result.job_id.c_str());
  }
  std::fprintf(stderr,
               "lact submit: job %s runs on; follow it with lact watch --server %s --job %s\n",
               result.job_id.c_str(), server.c_str(), result.job_id.c_str());
}

}  // namespace

absl::Status SubmitCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags,
      Flags::Parse(args,
                   {"server", "token-file", "tls-ca", "model", "context", "query", "workers",
                    "muon-steps", "chunk-tokens", "dtype", "timeout", "out", "shards",
                    "context-ref", "context-tensor", "out-ref", "tenant"},
                   {"query", "shards"}, {"detach", "cancel-on-disconnect", "json", "replace"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(SubmitOptions options, SubmitOptionsFromFlags(flags));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(ModelConfig config, client.FindModel(options.model));
  Tensor context_tensor;
  LACT_ASSIGN_OR_RETURN(const ContextInput context,
                        SubmitContext(flags, config.input_width(), &context_tensor));
  std::vector<Tensor> queries;
  for (const std::string& q : flags.GetAll("query")) {
    LACT_ASSIGN_OR_RETURN(Tensor t, LoadTokens(q, config.input_width()));
    queries.push_back(std::move(t));
  }
  const absl::StatusOr<std::string> config_json = JobConfigJson(config, options.options);
  const std::string out_path = flags.Get("out").value_or("");
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<StreamedResultFile> out_file,
                        StreamedOut(out_path, config, config_json, context, queries, &options));
  ProgressLine line;
  absl::StatusOr<JobResult> result = client.Submit(
      options, context, queries, [&](const v1::Progress& p) { line.Update(p); },
      [&](const std::string& id) {
        std::fprintf(stderr, "lact submit: job %s admitted%s\n", id.c_str(),
                     options.cancel_on_disconnect
                         ? ""
                         : " (it runs on if this command ends: lact cancel stops it, "
                           "lact fetch collects its results)");
      });
  line.Finish();
  LACT_RETURN_IF_ERROR(result.status());
  if (options.detach) {
    PrintDetached(flags, server, *result);
    return absl::OkStatus();
  }
  if (out_file != nullptr) {
    LACT_RETURN_IF_ERROR(out_file->Finish(*result));
  } else if (!out_path.empty()) {
    LACT_RETURN_IF_ERROR(config_json.status());
    LACT_RETURN_IF_ERROR(WriteResult(out_path, *config_json,
                                     result->output.size() > 0 ? &result->output : nullptr,
                                     result->queries, result->state));
  }
  return PrintSubmitted(flags, options, *result);
}

absl::Status QueryCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args,
                                                  {"server", "token-file", "tls-ca", "job", "query",
                                                   "dtype", "timeout", "out"},
                                                  {"query"}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(std::string job, flags.Required("job"));
  LACT_ASSIGN_OR_RETURN(std::string out_path, flags.Required("out"));
  LACT_RETURN_IF_ERROR(CheckOutputFile("out", out_path));
  LACT_ASSIGN_OR_RETURN(WireType dtype,
                        WireTypeNamed(flags.Get("dtype").value_or("f32"), "--dtype"));
  LACT_ASSIGN_OR_RETURN(int64_t timeout_s, flags.Int("timeout", 0, 0, int64_t{1} << 31));
  if (flags.GetAll("query").empty())
    return absl::InvalidArgumentError("give at least one --query FILE.npy");
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, client.GetJob(job));
  LACT_ASSIGN_OR_RETURN(ModelConfig config, client.FindModel(info.model()));
  std::vector<Tensor> queries;
  for (const std::string& q : flags.GetAll("query")) {
    LACT_ASSIGN_OR_RETURN(Tensor t, LoadTokens(q, config.input_width()));
    queries.push_back(std::move(t));
  }
  LACT_ASSIGN_OR_RETURN(std::string config_json, JobConfigJson(config, FromProto(info.options())));
  LACT_ASSIGN_OR_RETURN(JobResult result,
                        client.Query(job, queries, dtype, std::chrono::seconds(timeout_s)));
  const std::vector<Tensor>& outputs = result.queries;
  LACT_RETURN_IF_ERROR(WriteResult(out_path, config_json, nullptr, outputs, {}));
  if (flags.Has("json")) {
    PrintJson({{"job_id", job}, {"query_sets", outputs.size()}, {"out", out_path}});
    return absl::OkStatus();
  }
  std::fprintf(stderr, "lact query: %zu query sets against %s; wrote %s\n", outputs.size(),
               job.c_str(), out_path.c_str());
  return absl::OkStatus();
}

absl::Status StatusCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca", "job"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  std::vector<v1::JobInfo> jobs;
  if (std::optional<std::string> job = flags.Get("job")) {
    LACT_ASSIGN_OR_RETURN(v1::JobInfo info, client.GetJob(*job));
    jobs.push_back(info);
  } else {
    LACT_ASSIGN_OR_RETURN(jobs, client.ListJobs());
  }
  if (flags.Has("json")) return PrintMessages("jobs", jobs);
  for (const v1::JobInfo& j : jobs) {
    const std::string dropped =
        j.results_dropped().empty() ? "" : absl::StrCat(" (", j.results_dropped(), ")");
    std::printf("%s  %-9s  %-20s  %lld tokens on %d workers  %.1f s  %s%s%s%s\n",
                j.job_id().c_str(), v1::JobInfo::Status_Name(j.status()).c_str(), j.model().c_str(),
                static_cast<long long>(j.context_tokens()), j.workers(), j.stats().seconds(),
                j.outputs_retained()   ? "results retained"
                : j.results_retained() ? "query outputs and state retained"
                : j.state_retained()   ? "state retained"
                                       : "nothing retained",
                dropped.c_str(), j.error().empty() ? "" : "  error: ", j.error().c_str());
  }
  return absl::OkStatus();
}

absl::Status WatchCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca", "job"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(std::string job, flags.Required("job"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  ProgressLine line;
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, client.WatchJob(job, [&](const v1::JobInfo& j) {
    const bool live = j.status() == v1::JobInfo::RUNNING || j.status() == v1::JobInfo::QUEUED;
    if (live && j.progress().stage() != v1::Progress::STAGE_UNSPECIFIED) {
      line.Update(j.progress());
    }
  }));
  line.Finish();
  if (flags.Has("json")) {
    LACT_ASSIGN_OR_RETURN(nlohmann::json record, ProtoToJson(info));
    PrintJson(record);
  } else {
    std::printf("%s %s\n", info.job_id().c_str(), v1::JobInfo::Status_Name(info.status()).c_str());
  }
  if (info.status() != v1::JobInfo::SUCCEEDED) {
    return absl::AbortedError(absl::StrCat(
        "job ", job, " ended ", v1::JobInfo::Status_Name(info.status()), ": ", info.error()));
  }
  if (flags.Has("json")) return absl::OkStatus();
  PrintStats(info.stats(), info.context_tokens());
  if (info.results_retained()) {
    std::fprintf(stderr,
                 "  results retained: lact fetch --server %s --job %s --out FILE.safetensors\n",
                 server.c_str(), job.c_str());
  }
  return absl::OkStatus();
}

absl::Status FetchCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags,
      Flags::Parse(args, {"server", "token-file", "tls-ca", "job", "out"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(std::string job, flags.Required("job"));
  LACT_ASSIGN_OR_RETURN(std::string out_path, flags.Required("out"));
  LACT_RETURN_IF_ERROR(CheckOutputFile("out", out_path));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, client.GetJob(job));
  LACT_ASSIGN_OR_RETURN(ModelConfig model, client.FindModel(info.model()));
  LACT_ASSIGN_OR_RETURN(std::string config, JobConfigJson(model, FromProto(info.options())));
  LACT_ASSIGN_OR_RETURN(JobResult result, client.FetchResult(job));
  LACT_RETURN_IF_ERROR(WriteResult(out_path, config, &result.output, result.queries, result.state));
  if (flags.Has("json")) {
    PrintJson({{"job_id", job},
               {"outputs", result.output.size() > 0},
               {"query_sets", result.queries.size()},
               {"state_tensors", result.state.size()},
               {"workers", result.shards.size()},
               {"out", out_path}});
    return absl::OkStatus();
  }
  std::fprintf(
      stderr,
      "lact fetch: job %s: %s%zu query sets, %zu state tensors from %zu workers; wrote %s\n",
      job.c_str(), result.output.size() > 0 ? "outputs, " : "", result.queries.size(),
      result.state.size(), result.shards.size(), out_path.c_str());
  return absl::OkStatus();
}

absl::Status DeleteCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca", "job"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(std::string job, flags.Required("job"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_RETURN_IF_ERROR(client.DeleteJob(job));
  if (flags.Has("json")) {
    PrintJson({{"job_id", job}, {"deleted", true}});
    return absl::OkStatus();
  }
  std::fprintf(stderr, "lact delete: job %s and its retained results deleted\n", job.c_str());
  return absl::OkStatus();
}

absl::Status CancelCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args, {"server", "token-file", "tls-ca", "job"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(std::string job, flags.Required("job"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(v1::JobInfo info, client.CancelJob(job));
  if (flags.Has("json")) {
    LACT_ASSIGN_OR_RETURN(nlohmann::json record, ProtoToJson(info));
    PrintJson(record);
    return absl::OkStatus();
  }
  std::printf("%s %s\n", info.job_id().c_str(), v1::JobInfo::Status_Name(info.status()).c_str());
  return absl::OkStatus();
}

absl::Status ModelsCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(Flags flags,
                        Flags::Parse(args, {"server", "token-file", "tls-ca"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(std::vector<v1::ModelInfo> models, client.ListModels());
  if (flags.Has("json")) return PrintMessages("models", models);
  for (const v1::ModelInfo& m : models) {
    std::printf("%-20s %d workers  %s\n", m.name().c_str(), m.workers(), m.config_json().c_str());
  }
  return absl::OkStatus();
}

absl::Status WorkersCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(Flags flags,
                        Flags::Parse(args, {"server", "token-file", "tls-ca"}, {}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string server, flags.Required("server"));
  LACT_ASSIGN_OR_RETURN(LactClient client, Connect(flags, server));
  LACT_ASSIGN_OR_RETURN(std::vector<v1::WorkerInfo> workers, client.ListWorkers());
  if (flags.Has("json")) return PrintMessages("workers", workers);
  std::printf("%-22s %-7s %-9s %-6s %-9s  %-22s %s\n", "ADDRESS", "BACKEND", "HEALTH", "LEASED",
              "HEARTBEAT", "METRICS", "MODELS");
  for (const v1::WorkerInfo& w : workers) {
    const char* health = w.draining() ? "draining" : w.healthy() ? "healthy" : "unhealthy";
    std::printf("%-22s %-7s %-9s %-6s %8.1fs  %-22s %s\n", w.address().c_str(), w.backend().c_str(),
                health, w.leased() ? "yes" : "no", w.seconds_since_heartbeat(),
                w.metrics_address().empty() ? "-" : w.metrics_address().c_str(),
                absl::StrJoin(w.models(), ",").c_str());
  }
  if (workers.empty()) std::printf("(no worker has registered)\n");
  return absl::OkStatus();
}

// The token of the first "TENANT TOKEN" line of a coordinator's
// --auth-tokens file (lact local's start-up check presents it).
absl::StatusOr<std::string> FirstTenantToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--auth-tokens ", path, ": cannot be read"));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.empty() || fields[0][0] == '#') continue;
    if (fields.size() == 2) return fields[1];
    break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--auth-tokens ", path, ": its first line must be 'TENANT TOKEN'"));
}

absl::Status LocalCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args,
                                {"workers", "port", "model-dir", "threads-per-worker", "backend",
                                 "devices", "precision", "scan-math", "collective", "data-root",
                                 "tls", "no-spool", "auth-tokens", "warm-bytes"},
                                {}, {"tls", "no-spool"}));
  LocalClusterOptions options;
  options.tls = flags.Has("tls");
  options.spool = !flags.Has("no-spool");
  options.data_root = flags.Get("data-root").value_or("");
  if (std::optional<std::string> tokens = flags.Get("auth-tokens")) {
    const std::string path = std::filesystem::absolute(*tokens).string();
    LACT_ASSIGN_OR_RETURN(options.token, FirstTenantToken(path));
    options.coordinator_args = {"--auth-tokens", path};
  }
  LACT_ASSIGN_OR_RETURN(int64_t workers, flags.Int("workers", 2, 1, 256));
  LACT_ASSIGN_OR_RETURN(int64_t port, flags.Int("port", 0, 0, 65535));
  LACT_ASSIGN_OR_RETURN(int64_t threads, flags.Int("threads-per-worker", 0, 0, 1024));
  LACT_RETURN_IF_ERROR(flags.Int("warm-bytes", 0, 0, kMaxWarmBytes).status());
  options.workers = static_cast<int>(workers);
  options.port = static_cast<int>(port);
  options.threads_per_worker = static_cast<int>(threads);
  options.model_dir = flags.Get("model-dir").value_or("");
  for (const char* name : {"backend", "precision", "scan-math", "collective", "warm-bytes"}) {
    if (std::optional<std::string> v = flags.Get(name)) {
      options.worker_args.push_back(absl::StrCat("--", name));
      options.worker_args.push_back(*v);
    }
  }
  if (std::optional<std::string> devices = flags.Get("devices")) {
    for (absl::string_view d : absl::StrSplit(*devices, ',')) {
      int device = 0;
      if (!absl::SimpleAtoi(d, &device) || device < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices '", *devices, "': expected CUDA device numbers like 0,1"));
      }
      options.devices.push_back(device);
    }
  }
  BlockStopSignals("lact");
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  std::printf(
      "lact local: coordinator at %s with %d workers (metrics at http://%s/metrics; "
      "lact workers lists the workers'; Ctrl-C stops)\n",
      cluster->address().c_str(), options.workers, cluster->metrics_address().c_str());
  if (options.tls) {
    std::printf("lact local: TLS on every port; clients trust --tls-ca %s\n",
                cluster->tls_ca_file().c_str());
  }
  std::fflush(stdout);
  WaitForStopSignal();
  std::fprintf(stderr, "lact local: stopping\n");
  return absl::OkStatus();
}

}  // namespace lact::cli
