// The types a shard's run is described by, shared by the schedule, the
// backends and the worker service. It includes nothing of worker/ but the
// collectives' interface and group.
#ifndef LACT_WORKER_SCHEDULE_SHARD_H_
#define LACT_WORKER_SCHEDULE_SHARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "worker/collective/collective.h"
#include "worker/collective/group_spec.h"

namespace lact {

class StageProfile;

// Where a backend runs and with what; chosen when a worker or `lact run`
// starts. Unknown values are refused by ValidateBackend (worker/backends.h).
struct BackendOptions {
  std::string backend = "cpu";                // cpu | cuda
  int threads = 0;                            // CPU compute threads, 0 = all cores
  int64_t tile_tokens = 0;                    // 0: the backend's default (CPU 1024, CUDA 65536)
  int device = 0;                             // CUDA device
  std::string precision = "fp32";             // GEMM operands: fp32 | bf16
  std::string collective = "gloo";            // CUDA workers' transport: gloo | nccl
  std::string collective_host = "127.0.0.1";  // address Gloo listens on
  // CUDA SSD scan: fp32 | tf32x3 | bf16; empty: bf16 in bf16 precision
  // where the model's shapes allow it, else fp32.
  std::string scan_math;
};

// Takes a context's output rows as the last block finishes them: local
// rows [rows.first, rows.first + rows.n) of the shard's outputs ([L,
// output width]; the rows are final, the rest of the tensor is not yet),
// handed over in row order, from the thread that computes. An error ends
// the run with it.
using OutputRowsSink = std::function<absl::Status(RowSlice rows)>;

// What a run reports and how it is stopped.
struct RunHooks {
  std::function<void(int, int)> on_layer_done;  // (layers done, layers in all)
  std::function<bool()> cancelled;              // polled between tiles
  // When set, a context's outputs go here tile by tile and the run returns
  // an empty tensor; query sets return theirs whole.
  OutputRowsSink on_output_rows;
  // When set, every sequence's ops are timed into it (stage_profile.h).
  StageProfile* profile = nullptr;
};

// A context (its outputs, and the fused state it leaves) or a query set (its
// outputs, read against a context's fused state; always on one rank).
enum class SequenceKind { kContext, kQuery };

// This rank's part of a sequence: rows [begin, begin + L) of `total`, and
// the collective its small exchanges (conv halos, scan summaries) go
// through. The gradient all-reduce belongs to the backend's ops.
struct ShardContext {
  SequenceKind kind = SequenceKind::kContext;
  Collective* sync = nullptr;
  int64_t begin = 0;
  int64_t total = 0;
  std::function<bool()> cancelled;  // polled between tiles
  OutputRowsSink output_rows;       // null: the outputs are returned whole

  bool context() const { return kind == SequenceKind::kContext; }
  bool distributed() const { return sync->size() > 1; }
  bool Cancelled() const { return cancelled && cancelled(); }
};

// Rows [begin, begin + L) of a context of `total`, run with `hooks`.
inline ShardContext ContextShard(Collective* sync, int64_t begin, int64_t total,
                                 const RunHooks& hooks) {
  return {.sync = sync,
          .begin = begin,
          .total = total,
          .cancelled = hooks.cancelled,
          .output_rows = hooks.on_output_rows};
}

// Time spent in the gradient all-reduce and the part of it the compute
// waited for (the rest was hidden behind the BiMamba scans).
struct OverlapStats {
  double allreduce_seconds = 0;
  double waited_seconds = 0;
};

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_SHARD_H_
