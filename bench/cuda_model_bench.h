// The whole-model GPU benchmark: a preset model on a long
// context through CudaRunner, on one rank, or on two ranks sharing the GPU
// (threads of this process, Gloo over 127.0.0.1 with the gradient
// all-reduce staged through the host), reported as model FLOP/s (docs/model.md
// FLOPs, bench/flops.h) and the share of the all-reduce hidden behind the
// BiMamba kernels.
#ifndef LACT_BENCH_CUDA_MODEL_BENCH_H_
#define LACT_BENCH_CUDA_MODEL_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"

namespace lact::bench {

struct ModelBenchResult {
  double seconds = 0;            // context run, slowest rank, after a warm-up
  double model_flops = 0;        // model FLOPs of the context (docs/model.md)
  double allreduce_seconds = 0;  // summed over ranks
  double waited_seconds = 0;     // the part the compute waited for
  double hidden_fraction() const {
    return allreduce_seconds > 0 ? 1 - waited_seconds / allreduce_seconds : 1;
  }
};

// `preset` as in MakePresetModel ("base", "small"); `ranks` 1 or 2;
// `scan_math` as BackendOptions::scan_math.
absl::StatusOr<ModelBenchResult> RunModelBench(const std::string& preset, int64_t tokens,
                                               cuda::Precision precision, int ranks,
                                               const std::string& scan_math = "fp32");

}  // namespace lact::bench

#endif  // LACT_BENCH_CUDA_MODEL_BENCH_H_
