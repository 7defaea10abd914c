// bench_ops' measurements (ops_rows.cc): preset:small's first layer, op by
// op and whole, in float32 and in the bf16 mode, each as its best time of
// repeated runs, beside the machine's own sgemm and bf16 matmul rates
// measured in the same run. bench_ops.cc prints them and writes the JSON.
#ifndef LACT_BENCH_OPS_BENCH_H_
#define LACT_BENCH_OPS_BENCH_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/flops.h"
#include "common/model.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/ssd_scan.h"

namespace lact::bench {

// Best time of repeated runs (at least 3, at least ~0.3 s in all).
double BestSeconds(const std::function<void()>& fn);

// The machine's own float32 rate: the faster library's sgemm 2048^3.
struct Sgemm {
  double onednn = 0, openblas = 0;
  void Measure();
  double Best() const { return std::max(onednn, openblas); }
};

// The same product on the CPU's bf16 matmul (bf16 operands, float32
// accumulation); 0 where there is none.
double Bf16MatmulRate();

struct Row {
  std::string op;
  double seconds, flops;
  double bf16_seconds = 0;  // the op in the bf16 mode; 0: the same float32 code
};

// The whole layer's best times: on oneDNN (the default), on OpenBLAS's
// sgemm, with the row slices off (0 with one thread), in the bf16 mode,
// and that emulated (0 where the CPU has no bf16 matmul).
struct LayerTimes {
  double layer = 1e30, openblas = 1e30, unsliced = 1e30, bf16 = 1e30, emulated = 1e30;
  double bimamba = 0;  // the layer's BiMamba half alone
  bool compared_slices = false, compared_emulation = false;
};

class OpsBench {
 public:
  // `tile`, `bf16_tile`: the layer's tiles in each precision.
  static absl::StatusOr<std::unique_ptr<OpsBench>> Create(int64_t tokens, int64_t tile,
                                                          int64_t bf16_tile);

  // The op rows, in the layer's order.
  void MeasureMixerOps();
  void MeasureLactOps();
  // The layer in alternating rounds, the yardsticks measured again each
  // round (this VM's neighbours move a single run by +-20%).
  LayerTimes MeasureLayer();
  // Both scan directions chunked (SSD), and as a per-token recurrence.
  double ssd_seconds() const { return ssd_; }
  double NaiveScanSeconds();
  double MuonSeconds();

  int64_t tokens() const { return T_; }
  int64_t tile() const { return tile_; }
  int64_t bf16_tile() const { return bf16_tile_; }
  const ModelConfig& config() const { return c_; }
  const LayerFlops& flops() const { return f_; }
  const std::vector<Row>& rows() const { return rows_; }
  const Sgemm& sgemm() const { return sgemm_; }
  double bf16_yardstick() const { return bf16_yardstick_; }
  int yardstick_runs() const { return yardstick_runs_; }

 private:
  OpsBench(int64_t tokens, int64_t tile, int64_t bf16_tile, Model model, Model bf16_model);
  void GemmRow(const std::string& op, double flops, int times,
               const std::function<void(cpu::Operands, const LayerWeights&)>& fn,
               int bf16_times = 0);
  double TiledScanSeconds();

  int64_t T_, tile_, bf16_tile_;
  ModelConfig c_;
  Model model_, bf16_model_;
  LayerFlops f_;
  // The linear layers' weights packed once and the bf16 rows' fast weights
  // copied to bf16 once, as the CPU backend keeps them.
  cpu::PackedWeights packed_;
  cpu::Bf16Copies fast_copies_;
  Sgemm sgemm_;
  double bf16_yardstick_ = 0;
  int yardstick_runs_ = 1;
  std::vector<Row> rows_;
  // The mixer's inputs and outputs, shared by its rows and the scans.
  std::vector<float> h_, proj_, xbc_, y_, out_, u_, dt_, a_, history_, state_;
  cpu::ScanParams scan_{};
  double ssd_ = 0;
};

}  // namespace lact::bench

#endif  // LACT_BENCH_OPS_BENCH_H_
