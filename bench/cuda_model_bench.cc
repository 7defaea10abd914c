#include "bench/cuda_model_bench.h"

#include <chrono>
#include <thread>
#include <vector>

#include "bench/flops.h"
#include "common/model.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "gloo/rendezvous/hash_store.h"
#include "worker/collective/gloo_collective.h"
#include "worker/collective/host_staged_allreduce.h"
#include "worker/cuda/cuda_runner.h"

namespace lact::bench {
namespace {

using Clock = std::chrono::steady_clock;

Tensor RandomRows(int64_t rows, int64_t width, uint64_t seed) {
  Tensor t({rows, width});
  Random r(seed);
  for (float& v : t.data) v = static_cast<float>(2 * r.Uniform() - 1);
  return t;
}

double ContextFlops(const ModelConfig& c, int64_t tokens) {
  double per_token = PerTokenFlops(c).total() * c.n_layers;
  if (c.d_input > 0) per_token += 2.0 * c.d_input * c.d_model;
  if (c.d_output > 0) per_token += 2.0 * c.d_model * c.d_output;
  return per_token * static_cast<double>(tokens);
}

// One rank's context shard, run twice (a warm-up, then timed).
absl::Status RunRank(const Model& model, cuda::Precision precision, const std::string& scan_math,
                     const Tensor& shard, int64_t begin, int64_t total, Collective* sync,
                     Collective* grads, double* seconds, OverlapStats* overlap) {
  BackendOptions options{.backend = "cuda", .precision = cuda::PrecisionName(precision)};
  options.scan_math = scan_math;
  LACT_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner,
                        CudaRunner::Create(model, model.config(), options));
  HostStagedAllReduce reduce(grads);
  FusedState state;
  for (int pass = 0; pass < 2; ++pass) {
    Tensor input = shard;  // the runner consumes its tokens; the copy is not the job's
    const auto start = Clock::now();
    LACT_RETURN_IF_ERROR(
        runner->RunContextShard(std::move(input), begin, total, sync, &reduce, &state).status());
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (pass == 0) *overlap = runner->overlap();
  }
  overlap->allreduce_seconds = runner->overlap().allreduce_seconds - overlap->allreduce_seconds;
  overlap->waited_seconds = runner->overlap().waited_seconds - overlap->waited_seconds;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelBenchResult> RunModelBench(const std::string& preset, int64_t tokens,
                                               cuda::Precision precision, int ranks,
                                               const std::string& scan_math) {
  if (ranks < 1 || ranks > 2 || tokens < ranks)
    return absl::InvalidArgumentError("1 or 2 ranks, >= 1 token each");
  LACT_ASSIGN_OR_RETURN(Model model, MakePresetModel(preset, 1));
  const Tensor context = RandomRows(tokens, model.config().input_width(), 2);
  gloo::rendezvous::HashStore store;
  std::vector<double> seconds(ranks);
  std::vector<OverlapStats> overlap(ranks);
  std::vector<absl::Status> status(ranks);
  std::vector<std::thread> threads;
  const int64_t per_rank = tokens / ranks;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      const int64_t begin = r * per_rank, n = r + 1 == ranks ? tokens - begin : per_rank;
      Tensor shard({n, context.dim(1)});
      std::copy_n(context.ptr() + begin * context.dim(1), shard.size(), shard.ptr());
      std::unique_ptr<Collective> sync, grads;
      if (ranks == 1) {
        sync = std::make_unique<LocalCollective>();
        grads = std::make_unique<LocalCollective>();
      } else {
        auto s = GlooCollective::Connect(store, "sync", r, ranks, {});
        auto g = GlooCollective::Connect(store, "grads", r, ranks, {});
        if (!s.ok() || !g.ok()) {
          status[r] = s.ok() ? g.status() : s.status();
          return;
        }
        sync = *std::move(s);
        grads = *std::move(g);
      }
      status[r] = RunRank(model, precision, scan_math, shard, begin, tokens, sync.get(),
                          grads.get(), &seconds[r], &overlap[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  ModelBenchResult result;
  for (int r = 0; r < ranks; ++r) {
    LACT_RETURN_IF_ERROR(status[r]);
    result.seconds = std::max(result.seconds, seconds[r]);
    result.allreduce_seconds += overlap[r].allreduce_seconds;
    result.waited_seconds += overlap[r].waited_seconds;
  }
  result.model_flops = ContextFlops(model.config(), tokens);
  return result;
}

}  // namespace lact::bench
