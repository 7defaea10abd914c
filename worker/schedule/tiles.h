// Tile loops of the schedule: fn(first, n) over rows [lo, hi) in tiles of at
// most `tile` rows, forward or (for a backward scan) from the end, stopping
// with the first error and with CANCELLED when the shard is cancelled.
#ifndef LACT_WORKER_SCHEDULE_TILES_H_
#define LACT_WORKER_SCHEDULE_TILES_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "worker/schedule/shard.h"

namespace lact {

inline absl::Status CancelledStatus() { return absl::CancelledError("the job was cancelled"); }

template <typename Fn>
absl::Status ForEachTile(int64_t lo, int64_t hi, int64_t tile, const ShardContext& shard, Fn fn) {
  for (int64_t first = lo; first < hi; first += tile) {
    if (shard.Cancelled()) return CancelledStatus();
    LACT_RETURN_IF_ERROR(fn(first, std::min(tile, hi - first)));
  }
  return absl::OkStatus();
}

template <typename Fn>
absl::Status ForEachTileReversed(int64_t lo, int64_t hi, int64_t tile, const ShardContext& shard,
                                 Fn fn) {
  for (int64_t end = hi; end > lo; end -= tile) {
    if (shard.Cancelled()) return CancelledStatus();
    const int64_t n = std::min(tile, end - lo);
    LACT_RETURN_IF_ERROR(fn(end - n, n));
  }
  return absl::OkStatus();
}

}  // namespace lact

#endif  // LACT_WORKER_SCHEDULE_TILES_H_
