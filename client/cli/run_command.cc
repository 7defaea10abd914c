#include "client/cli/run_command.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/json_output.h"
#include "client/cli/output_file.h"
#include "client/cli/tokens_source.h"
#include "common/flags.h"
#include "common/fused_state.h"
#include "common/model.h"
#include "common/peak_rss.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/timing.h"
#include "worker/backends.h"

namespace lact::cli {
namespace {

double PeakRssMiB() { return static_cast<double>(PeakRssBytes()) / (1 << 20); }

absl::StatusOr<ModelConfig> JobConfig(const Model& model, const Flags& flags) {
  JobOptions options;
  LACT_ASSIGN_OR_RETURN(std::optional<int64_t> muon, flags.OptionalInt("muon-steps", 0, 100));
  LACT_ASSIGN_OR_RETURN(std::optional<int64_t> chunk,
                        flags.OptionalInt("chunk-tokens", 0, int64_t{1} << 30));
  if (muon) options.muon_steps = static_cast<int>(*muon);
  if (chunk) options.chunk_tokens = static_cast<int>(*chunk);
  return ApplyJobOptions(model.config(), options);
}

// --backend and the flags that go with it (a tile of 0 tokens: the
// backend's own default; a GPU wants far bigger tiles than a CPU core's caches).
absl::StatusOr<BackendOptions> BackendFromFlags(const Flags& flags) {
  const BackendOptions defaults;
  LACT_ASSIGN_OR_RETURN(int64_t threads, flags.Int("threads", 0, 0, 1024));
  const std::string backend = flags.Get("backend").value_or(defaults.backend);
  const std::string precision = flags.Get("precision").value_or(defaults.precision);
  LACT_ASSIGN_OR_RETURN(int64_t tile, flags.Int("tile-tokens", 0, 0, int64_t{1} << 24));
  LACT_ASSIGN_OR_RETURN(int64_t device, flags.Int("device", 0, 0, 1024));
  const BackendOptions options{.backend = backend,
                               .threads = static_cast<int>(threads),
                               .tile_tokens = tile,
                               .device = static_cast<int>(device),
                               .precision = precision,
                               .scan_math = flags.Get("scan-math").value_or("")};
  LACT_RETURN_IF_ERROR(ValidateBackend(options));
  return options;
}

// What a run produces: the context's outputs, each query set's, and the
// fused state.
struct RunOutputs {
  Tensor output;
  std::vector<Tensor> queries;
  FusedState state;
};

absl::StatusOr<RunOutputs> RunJob(ShardRunner& runner, Tensor context,
                                  std::vector<Tensor> queries) {
  RunOutputs out;
  LACT_RETURN_IF_ERROR(runner.JoinGroup(GroupSpec{}));  // a group of one
  const int64_t context_tokens = context.rank() > 0 ? context.dim(0) : 0;
  LACT_ASSIGN_OR_RETURN(out.output,
                        runner.RunContextShard(std::move(context), 0, context_tokens, &out.state));
  for (size_t k = 0; k < queries.size(); ++k) {
    absl::StatusOr<Tensor> q = runner.RunQuery(std::move(queries[k]), out.state);
    if (!q.ok()) {
      return absl::Status(q.status().code(),
                          absl::StrCat("query set ", k, ": ", q.status().message()));
    }
    out.queries.push_back(*std::move(q));
  }
  return out;
}

absl::Status WriteOutputs(const std::string& path, const ModelConfig& config,
                          const RunOutputs& out) {
  SafetensorsWriter writer;
  writer.Add("output", out.output);
  for (size_t k = 0; k < out.queries.size(); ++k)
    writer.Add(absl::StrCat("query_", k), out.queries[k]);
  for (const auto& [name, t] : FusedStateTensors(out.state)) writer.Add(name, *t);
  writer.SetMetadata("lact.config", ModelConfigToJson(config));
  return writer.Write(path);
}

}  // namespace

absl::Status RunCommand(const std::vector<std::string>& args) {
  LACT_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args,
                                                  {"model", "context", "query", "muon-steps",
                                                   "chunk-tokens", "threads", "tile-tokens", "out",
                                                   "backend", "device", "precision", "scan-math"},
                                                  {"query"}, {"json"}));
  LACT_ASSIGN_OR_RETURN(std::string model_spec, flags.Required("model"));
  LACT_ASSIGN_OR_RETURN(std::string context_spec, flags.Required("context"));
  LACT_ASSIGN_OR_RETURN(std::string out_path, flags.Required("out"));
  LACT_RETURN_IF_ERROR(CheckOutputFile("out", out_path));
  LACT_ASSIGN_OR_RETURN(const BackendOptions backend, BackendFromFlags(flags));
  LACT_ASSIGN_OR_RETURN(Model resolved, ResolveModel(model_spec));
  const auto model = std::make_shared<const Model>(std::move(resolved));
  LACT_ASSIGN_OR_RETURN(ModelConfig config, JobConfig(*model, flags));
  LACT_ASSIGN_OR_RETURN(Tensor context, LoadTokens(context_spec, config.input_width()));
  std::vector<Tensor> queries;
  for (const std::string& q : flags.GetAll("query")) {
    LACT_ASSIGN_OR_RETURN(Tensor t, LoadTokens(q, config.input_width()));
    queries.push_back(std::move(t));
  }
  const int64_t context_tokens = context.rank() > 0 ? context.dim(0) : 0;
  int64_t total_tokens = context_tokens;
  for (const Tensor& q : queries) total_tokens += q.rank() > 0 ? q.dim(0) : 0;
  std::fprintf(stderr, "lact run: %s, %lld context tokens, %zu query sets, %lld parameters\n",
               model_spec.c_str(), static_cast<long long>(context_tokens), queries.size(),
               static_cast<long long>(model->num_parameters()));
  const auto start = std::chrono::steady_clock::now();
  std::fprintf(stderr, "lact run: %s backend, %s\n", backend.backend.c_str(),
               DescribeBackend(backend).c_str());
  const RunHooks hooks{[start](int done, int all) {
    std::fprintf(stderr, "  context: layer %d/%d done, %.1f s\n", done, all, SecondsSince(start));
  }};
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<ShardRunner> runner,
                        MakeShardRunner(backend, model, config, hooks));
  LACT_ASSIGN_OR_RETURN(const RunOutputs out,
                        RunJob(*runner, std::move(context), std::move(queries)));
  const double seconds = SecondsSince(start);
  LACT_RETURN_IF_ERROR(WriteOutputs(out_path, config, out));
  if (flags.Has("json")) {
    PrintJson({{"model", model_spec},
               {"context_tokens", context_tokens},
               {"query_sets", out.queries.size()},
               {"tokens", total_tokens},
               {"seconds", seconds},
               {"tokens_per_second", static_cast<double>(total_tokens) / seconds},
               {"peak_rss_bytes", PeakRssBytes()},
               {"out", out_path}});
    return absl::OkStatus();
  }
  std::fprintf(stderr,
               "lact run: %lld tokens in %.2f s = %.0f tokens/s; peak RSS %.0f MiB; wrote %s\n",
               static_cast<long long>(total_tokens), seconds,
               static_cast<double>(total_tokens) / seconds, PeakRssMiB(), out_path.c_str());
  return absl::OkStatus();
}

}  // namespace lact::cli
