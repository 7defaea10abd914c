// Where a sequence's time goes, stage by stage and layer by layer: a
// BackendOps that times each call of the ops it wraps. The CPU's ops work
// synchronously, so a call's time is its stage's; a backend that queues
// work (a CUDA stream) shows its time where it is waited for (Sync, reads).
// The gradient all-reduce's finish is the time spent waiting for the
// other ranks' gradients; the scan-state calls hold the cross-shard
// summaries' waits (bimamba_schedule.h).
#ifndef LACT_WORKER_SCHEDULE_STAGE_PROFILE_H_
#define LACT_WORKER_SCHEDULE_STAGE_PROFILE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "worker/collective/collective.h"
#include "worker/schedule/backend_ops.h"
#include "worker/schedule/shard.h"

namespace lact {

enum class Stage {
  kLoadTokens,
  kBlockNorm,      // BeginBlock: h = rmsnorm(x)
  kMixerFwd,       // MixerTile forward with outputs
  kMixerBwd,       // MixerTile backward with outputs
  kMixerSummary,   // MixerTile without outputs: a shard's summary pass
  kScanState,      // Load/StoreScanState
  kLactGrads,      // AccumulateGrads
  kAllReduceWait,  // Start/FinishGradAllReduce
  kLactUpdate,     // Load/StoreFastWeights, ZeroGrads, UpdateFastWeights
  kLactApply,      // ApplyFastWeights
  kResidualMlp,    // ResidualMlp
  kOutput,         // OutputRows, ReadRows
  kSync,
  kExchange,    // the shard group's halos and summaries (mostly waiting for peers)
  kOutputRows,  // handing a tile's output rows on (OutputRowsSink)
  kCount
};

// The stage's name as the profile prints it ("mixer_fwd", ...).
const char* StageName(Stage stage);

// Seconds, calls and rows per stage and layer; layer -1 holds what runs
// outside a block (tokens in, outputs out when not during the last block).
class StageProfile {
 public:
  struct Cell {
    double seconds = 0;
    int64_t calls = 0;
    int64_t rows = 0;
  };
  using Row = std::array<Cell, static_cast<size_t>(Stage::kCount)>;

  // A block begins: what follows is the next layer's.
  void BeginLayer() { ++current_; }
  void Add(Stage stage, double seconds, int64_t rows);
  // Layers seen (blocks begun), and a stage's cell in a layer (-1: outside).
  int layers() const { return static_cast<int>(per_layer_.size()); }
  const Cell& At(int layer, Stage stage) const;
  // A stage over all layers, and everything.
  Cell Total(Stage stage) const;
  double TotalSeconds() const;
  // {"total": {stage: seconds}, "layers": [{stage: seconds}, ...]}, stages
  // that took no time left out.
  nlohmann::json ToJson() const;

 private:
  Row outside_{};
  std::vector<Row> per_layer_;
  int current_ = -1;
};

// `inner`'s calls, timed into `profile` (which must outlive this).
std::unique_ptr<BackendOps> Profiled(std::unique_ptr<BackendOps> inner, StageProfile* profile);
// `shard` with its exchanges and its output sink timed into `profile` too;
// `exchange` holds the timed collective and must outlive the shard's use.
ShardContext Profiled(const ShardContext& shard, StageProfile* profile,
                      std::unique_ptr<Collective>* exchange);

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_STAGE_PROFILE_H_
