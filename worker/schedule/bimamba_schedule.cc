#include "worker/schedule/bimamba_schedule.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "worker/schedule/shard_exchange.h"
#include "worker/schedule/tiles.h"

namespace lact {
namespace {

MambaState ZeroLike(const MambaState& s) { return {Tensor(s.ssm.shape), Tensor(s.conv.shape)}; }

bool FirstInScanOrder(Direction dir, const ShardContext& shard) {
  return ScanPosition(dir, shard.sync->rank(), shard.sync->size()) == 0;
}

bool LastInScanOrder(Direction dir, const ShardContext& shard) {
  return ScanPosition(dir, shard.sync->rank(), shard.sync->size()) == shard.sync->size() - 1;
}

// One direction over the shard's tiles in its scan order, from the loaded
// scan state.
absl::Status ScanDirection(const LayerWeights& w, Direction dir, bool outputs, bool summarize,
                           const ShardContext& shard, BackendOps& ops) {
  auto tile = [&](int64_t first, int64_t n) {
    return ops.MixerTile(w, dir, first, n, outputs, summarize);
  };
  if (dir == kForward) return ForEachTile(0, ops.tokens(), ops.tile(), shard, tile);
  return ForEachTileReversed(0, ops.tokens(), ops.tile(), shard, tile);
}

// The conv halo this shard starts from, and the conv history after the
// whole sequence, from every shard's last normed rows in scan order.
absl::Status ExchangeHalo(const ModelConfig& c, const MambaDirWeights& m, Direction dir,
                          const ShardContext& shard, BackendOps& ops, MambaState* start,
                          MambaState* final) {
  const int64_t L = ops.tokens(), D = c.d_model;
  const int64_t k = std::min<int64_t>(c.ssm.conv_width - 1, L);
  // Forward: the shard's last k rows; backward: its first k rows, reversed.
  std::vector<float> tail(k * D);
  LACT_RETURN_IF_ERROR(
      ops.ReadRows(Activation::kNormed, dir == kForward ? L - k : 0, k, tail.data()));
  if (dir == kBackward) {
    for (int64_t i = 0; i < k / 2; ++i) {
      std::swap_ranges(tail.begin() + i * D, tail.begin() + (i + 1) * D,
                       tail.begin() + (k - 1 - i) * D);
    }
  }
  const int64_t size = HaloPacketSize(c);
  std::vector<float> mine = HaloPacket(c, m, tail.data(), k), all(size * shard.sync->size());
  LACT_RETURN_IF_ERROR(shard.sync->AllGather(mine.data(), size, all.data()));
  ComposeHalos(c, dir, shard.sync->rank(), shard.sync->size(), all.data(), start, final);
  return absl::OkStatus();
}

// [log decay (H_s), state from zero (H_s*P*N)] of this shard in direction
// `dir`, into `summary`. The first shard in scan order runs its real scan
// (into acc); the others but the last a state-only pre-pass. No carry-in
// reads the last shard's summary, so it leaves `summary` zero: its real
// scan, from its carry-in, reaches the direction's final state, which
// ShareFinalStates gives the other ranks.
absl::Status Summarize(const ModelConfig& c, const LayerWeights& w, Direction dir,
                       const MambaState& start, const ShardContext& shard, BackendOps& ops,
                       float* summary) {
  if (LastInScanOrder(dir, shard)) return absl::OkStatus();
  LACT_RETURN_IF_ERROR(ops.LoadScanState(start));
  LACT_RETURN_IF_ERROR(ScanDirection(w, dir, /*outputs=*/FirstInScanOrder(dir, shard),
                                     /*summarize=*/true, shard, ops));
  MambaState reached = ZeroLike(start);
  LACT_RETURN_IF_ERROR(ops.StoreScanState(&reached, summary));
  std::copy(reached.ssm.data.begin(), reached.ssm.data.end(), summary + c.ssm_heads());
  return absl::OkStatus();
}

// Each direction's final SSM state, from the rank last in its scan order
// (`reached`: this rank's, where it is last), into final[dir].ssm.
absl::Status ShareFinalStates(const ShardContext& shard, const MambaState (&reached)[2],
                              MambaState (&final)[2]) {
  const int64_t size = reached[kForward].ssm.size(), ranks = shard.sync->size();
  std::vector<float> mine(2 * size, 0.0f), all(2 * size * ranks);
  for (Direction dir : {kForward, kBackward}) {
    if (LastInScanOrder(dir, shard)) {
      std::copy(reached[dir].ssm.data.begin(), reached[dir].ssm.data.end(),
                mine.begin() + dir * size);
    }
  }
  LACT_RETURN_IF_ERROR(shard.sync->AllGather(mine.data(), 2 * size, all.data()));
  for (Direction dir : {kForward, kBackward}) {
    const int last = RankAtScanPosition(dir, static_cast<int>(ranks) - 1, static_cast<int>(ranks));
    const float* from = all.data() + last * 2 * size + dir * size;
    std::copy(from, from + size, final[dir].ssm.data.begin());
  }
  return absl::OkStatus();
}

absl::Status RunDistributed(const ModelConfig& c, const LayerWeights& w, const ShardContext& shard,
                            BackendOps& ops, LayerState* out) {
  MambaState start[2], final[2];
  for (Direction dir : {kForward, kBackward}) {
    start[dir] = ZeroLike(out->mamba[dir]);
    final[dir] = ZeroLike(out->mamba[dir]);
    LACT_RETURN_IF_ERROR(ExchangeHalo(c, w.mamba[dir], dir, shard, ops, &start[dir], &final[dir]));
  }
  // Both directions' summaries in one all-gather.
  const int64_t size = SummarySize(c), ranks = shard.sync->size();
  std::vector<float> mine(2 * size), all(2 * size * ranks);
  for (Direction dir : {kForward, kBackward}) {
    LACT_RETURN_IF_ERROR(Summarize(c, w, dir, start[dir], shard, ops, mine.data() + dir * size));
  }
  LACT_RETURN_IF_ERROR(shard.sync->AllGather(mine.data(), 2 * size, all.data()));
  MambaState reached[2] = {ZeroLike(start[kForward]), ZeroLike(start[kBackward])};
  for (Direction dir : {kForward, kBackward}) {
    ComposeSummaries(c, dir, shard.sync->rank(), ranks, all.data(), 2 * size, dir * size,
                     &start[dir], &final[dir]);
    if (!FirstInScanOrder(dir, shard)) {
      LACT_RETURN_IF_ERROR(ops.LoadScanState(start[dir]));
      LACT_RETURN_IF_ERROR(
          ScanDirection(w, dir, /*outputs=*/true, /*summarize=*/false, shard, ops));
      if (LastInScanOrder(dir, shard))
        LACT_RETURN_IF_ERROR(ops.StoreScanState(&reached[dir], nullptr));
    }
  }
  LACT_RETURN_IF_ERROR(ShareFinalStates(shard, reached, final));
  for (Direction dir : {kForward, kBackward}) out->mamba[dir] = std::move(final[dir]);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunBiMamba(const ModelConfig& c, const LayerWeights& w, const ShardContext& shard,
                        BackendOps& ops, const LayerState* kept, LayerState* out) {
  if (shard.distributed()) {
    if (!shard.context()) return absl::InternalError("query sets run on one rank");
    return RunDistributed(c, w, shard, ops, out);
  }
  for (Direction dir : {kForward, kBackward}) {
    // A query's forward direction continues from the context's state.
    if (!shard.context() && dir == kForward) {
      LACT_RETURN_IF_ERROR(ops.LoadScanState(kept->mamba[dir]));
    } else {
      LACT_RETURN_IF_ERROR(ops.LoadScanState(ZeroLike((kept ? kept : out)->mamba[dir])));
    }
    LACT_RETURN_IF_ERROR(ScanDirection(w, dir, /*outputs=*/true, /*summarize=*/false, shard, ops));
    if (shard.context()) LACT_RETURN_IF_ERROR(ops.StoreScanState(&out->mamba[dir], nullptr));
  }
  return absl::OkStatus();
}

}  // namespace lact
