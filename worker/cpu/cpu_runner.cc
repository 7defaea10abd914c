#include "worker/cpu/cpu_runner.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"
#include "worker/cpu/cpu_ops.h"

namespace lact {

absl::StatusOr<Model> RoundGemmWeightsToBf16(const Model& model) {
  std::map<std::string, Tensor> tensors = model.tensors();
  for (auto& [name, t] : tensors) {
    bool gemm = false;
    for (const char* suffix : {"in_proj.weight", "out_proj.weight", "qkv.weight", "lr.weight",
                               "o_proj.weight", "gate.weight", "up.weight", "down.weight"}) {
      gemm = gemm || absl::EndsWith(name, suffix);
    }
    gemm = gemm || name == "embed.weight" || name == "head.weight";
    if (gemm) {
      const int64_t cols = t.size() / t.dim(0);  // [out, in] matrices, rows in parallel
      cpu::RoundRowsToBf16(t.ptr(), cols, t.dim(0), cols);
    }
  }
  return Model::FromTensors(model.config(), std::move(tensors));
}

namespace {

// SharedBf16Weights' copies, one per live shared model.
class Bf16WeightsCache {
 public:
  absl::StatusOr<std::shared_ptr<const Model>> Get(const std::shared_ptr<const Model>& model) {
    absl::MutexLock lock(&mu_);
    std::erase_if(entries_, [](const Entry& e) { return e.source.expired(); });
    for (const Entry& e : entries_) {
      if (!e.source.owner_before(model) && !model.owner_before(e.source)) return e.rounded;
    }
    LACT_ASSIGN_OR_RETURN(Model rounded, RoundGemmWeightsToBf16(*model));
    entries_.push_back({model, std::make_shared<const Model>(std::move(rounded))});
    return entries_.back().rounded;
  }

 private:
  struct Entry {
    std::weak_ptr<const Model> source;
    std::shared_ptr<const Model> rounded;
  };
  absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> SharedBf16Weights(
    const std::shared_ptr<const Model>& model) {
  static Bf16WeightsCache* const cache = new Bf16WeightsCache;
  return cache->Get(model);
}

std::string CpuBf16Mode() {
  if (cpu::Bf16MatmulOn()) {
    return absl::StrCat("oneDNN bf16 matmul on this CPU's bf16 units (", cpu::Bf16MatmulKernel(),
                        "; ", cpu::Bf16MatmulReason(),
                        "): GEMM operands bf16, float32 accumulation");
  }
  const std::string why = cpu::HasBf16Matmul()
                              ? absl::StrCat(cpu::Bf16MatmulKernel(), ", ", cpu::Bf16MatmulReason())
                              : cpu::Bf16MatmulKernel();
  return absl::StrCat(
      "emulated: GEMM operands rounded to bf16, products and sums in float32 sgemm "
      "(bf16 numerics at float32 speed; bf16 matmul ",
      why, ")");
}

int64_t DefaultCpuTileTokens(std::string_view precision) {
  return precision == "bf16" ? kDefaultCpuBf16TileTokens : kDefaultCpuTileTokens;
}

CpuRunner::CpuRunner(const Model& model, const ModelConfig& config, const BackendOptions& options,
                     RunHooks hooks, std::shared_ptr<const Model> bf16_weights)
    : model_(model),
      operands_(options.precision == "bf16" ? cpu::Operands::kBf16 : cpu::Operands::kFp32),
      rounded_(std::move(bf16_weights)),
      threads_(options.threads),
      tile_(options.tile_tokens > 0 ? options.tile_tokens
                                    : DefaultCpuTileTokens(options.precision)),
      runner_(config, std::move(hooks),
              [this](int64_t rows, Collective* grads) { return Ops(rows, grads); }) {}

absl::StatusOr<SequenceOps> CpuRunner::Ops(int64_t rows, Collective* grads) {
  cpu::SetNumThreads(threads_);
  if (operands_.bf16() && rounded_ == nullptr) {
    LACT_ASSIGN_OR_RETURN(Model rounded, RoundGemmWeightsToBf16(model_));
    rounded_ = std::make_shared<const Model>(std::move(rounded));
  }
  const Model& model = rounded_ != nullptr ? *rounded_ : model_;
  return SequenceOps{&model, std::make_unique<CpuOps>(model, runner_.config(), rows, tile_, grads,
                                                      &overlap_, operands_, &packed_)};
}

}  // namespace lact
