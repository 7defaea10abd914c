#include "worker/bimamba_shard.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/mamba_mixer.h"
#include "kernels/cpu/ssd_scan.h"
#include "worker/shard_exchange.h"

namespace lact {
namespace {

// Visits the shard's tiles in a direction's scan order: fn(rows, n, first)
// where rows are the tile's normed inputs in scan order (a reversed copy for
// the backward direction) and [first, first + n) are their local rows.
// Stops early when the shard is cancelled.
template <typename Fn>
void ForEachScanTile(const Tensor& h, int64_t tile, Direction dir, const ShardContext& shard,
                     std::vector<float>* scratch, Fn fn) {
  const int64_t L = h.dim(0), D = h.dim(1);
  if (dir == kForward) {
    for (int64_t t0 = 0; t0 < L && !shard.Cancelled(); t0 += tile) fn(h.ptr() + t0 * D, std::min(tile, L - t0), t0);
    return;
  }
  scratch->resize(std::min(tile, L) * D);
  for (int64_t end = L; end > 0 && !shard.Cancelled(); end -= tile) {
    const int64_t n = std::min(tile, end);
    for (int64_t i = 0; i < n; ++i) std::copy_n(h.ptr() + (end - 1 - i) * D, D, scratch->data() + i * D);
    fn(scratch->data(), n, end - n);
  }
}

// One direction of the BiMamba over a shard, with its exchanges.
class DirectionScan {
 public:
  DirectionScan(const ModelConfig& c, const LayerWeights& w, Direction dir, int64_t tile, const ShardContext& shard,
                const Tensor& h)
      : c_(c), w_(w), dw_(w.mamba[dir]), dir_(dir), tile_(tile), shard_(shard), h_(h) {}

  int Position() const { return ScanPosition(dir_, shard_.sync->rank(), shard_.sync->size()); }

  // The conv halo this shard starts from, and the conv state after the
  // whole sequence, from every shard's boundary rows.
  absl::Status ExchangeHalo(MambaState* start, MambaState* final) {
    const int64_t size = HaloPacketSize(c_);
    std::vector<float> mine = BoundaryPacket(), all(size * shard_.sync->size());
    LACT_RETURN_IF_ERROR(shard_.sync->AllGather(mine.data(), size, all.data()));
    ComposeHalos(c_, dir_, shard_.sync->rank(), shard_.sync->size(), all.data(), start, final);
    return absl::OkStatus();
  }

  bool FirstInScanOrder() const { return Position() == 0; }

  // [log decay (H_s), state from zero (H_s*P*N)] of this shard. The first
  // shard in scan order runs its real scan from `start` (zero) into acc;
  // the others a state-only pre-pass.
  std::vector<float> Summary(const MambaState& start, Tensor* acc) {
    const int heads = c_.ssm_heads();
    std::vector<float> summary(SummarySize(c_), 0.0f);
    MambaState run = start;
    if (FirstInScanOrder()) {
      Scan(&run, acc, summary.data());
    } else {
      ForEachScanTile(h_, tile_, dir_, shard_, &rev_, [&](const float* rows, int64_t n, int64_t) {
        cpu::MambaSummarySegment(c_, dw_, rows, n, {run.ssm.ptr(), run.conv.ptr()}, summary.data(), &ws_);
      });
    }
    std::copy(run.ssm.data.begin(), run.ssm.data.end(), summary.begin() + heads);
    return summary;
  }

  // From all ranks' summaries (rank-major, this direction's at `offset` of
  // each rank's `stride`): this shard's carry-in and the final state.
  void Compose(const std::vector<float>& all, int64_t stride, int64_t offset, MambaState* start,
               MambaState* final) {
    ComposeSummaries(c_, dir_, shard_.sync->rank(), shard_.sync->size(), all.data(), stride, offset, start, final);
  }

  // The scan itself from `state`: acc += y @ out_proj^T.
  void Scan(MambaState* state, Tensor* acc, float* log_decay = nullptr) {
    const int64_t D = c_.d_model, di = c_.d_inner();
    std::vector<float> y(tile_ * di), a(tile_ * D);
    ForEachScanTile(h_, tile_, dir_, shard_, &rev_, [&](const float* rows, int64_t n, int64_t first) {
      cpu::MambaMixerSegment(c_, dw_, rows, n, {state->ssm.ptr(), state->conv.ptr()}, &ws_, y.data(), log_decay);
      if (dir_ == kForward) {
        cpu::Linear(y.data(), di, n, di, w_.out_proj, D, acc->ptr() + first * D, D, 1.0f);
        return;
      }
      cpu::Linear(y.data(), di, n, di, w_.out_proj, D, a.data(), D);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        float* dst = acc->ptr() + (first + n - 1 - i) * D;
        const float* src = a.data() + i * D;
        for (int64_t k = 0; k < D; ++k) dst[k] += src[k];
      }
    });
  }

 private:
  // [count, rows...]: this shard's last min(W-1, L) conv inputs in scan order.
  std::vector<float> BoundaryPacket() const {
    const int64_t L = h_.dim(0), D = c_.d_model, k = std::min<int64_t>(c_.ssm.conv_width - 1, L);
    std::vector<float> rows(k * D);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t src = dir_ == kForward ? L - k + i : k - 1 - i;
      std::copy_n(h_.ptr() + src * D, D, rows.data() + i * D);
    }
    return HaloPacket(c_, dw_, rows.data(), k);
  }

  const ModelConfig& c_;
  const LayerWeights& w_;
  const MambaDirWeights& dw_;
  Direction dir_;
  int64_t tile_;
  const ShardContext& shard_;
  const Tensor& h_;
  std::vector<float> rev_;
  cpu::MixerWorkspace ws_;
};

MambaState ZeroLike(const MambaState& s) { return {Tensor(s.ssm.shape), Tensor(s.conv.shape)}; }

}  // namespace

absl::Status RunBiMambaShard(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile,
                             const ShardContext& shard, const Tensor& h, Tensor* acc, LayerState* state) {
  std::fill(acc->data.begin(), acc->data.end(), 0.0f);
  const absl::Status cancelled = absl::CancelledError("the job was cancelled");
  DirectionScan scans[2] = {{c, w, kForward, tile, shard, h}, {c, w, kBackward, tile, shard, h}};
  MambaState start[2], final[2];
  for (Direction dir : {kForward, kBackward}) {
    start[dir] = ZeroLike(state->mamba[dir]);
    final[dir] = ZeroLike(state->mamba[dir]);
  }
  if (!is_context) start[kForward] = state->mamba[kForward];
  if (shard.sync->size() == 1) {
    for (Direction dir : {kForward, kBackward}) scans[dir].Scan(&start[dir], acc);
    if (shard.Cancelled()) return cancelled;
    if (is_context) {
      state->mamba[kForward] = std::move(start[kForward]);
      state->mamba[kBackward] = std::move(start[kBackward]);
    }
    return absl::OkStatus();
  }
  if (!is_context) return absl::InternalError("query sets run on one rank");
  for (Direction dir : {kForward, kBackward}) LACT_RETURN_IF_ERROR(scans[dir].ExchangeHalo(&start[dir], &final[dir]));
  // Both directions' summaries in one all-gather.
  const int64_t size = SummarySize(c), ranks = shard.sync->size();
  std::vector<float> mine(2 * size), all(2 * size * ranks);
  for (Direction dir : {kForward, kBackward}) {
    std::vector<float> summary = scans[dir].Summary(start[dir], acc);
    std::copy(summary.begin(), summary.end(), mine.begin() + dir * size);
  }
  if (shard.Cancelled()) return cancelled;
  LACT_RETURN_IF_ERROR(shard.sync->AllGather(mine.data(), 2 * size, all.data()));
  for (Direction dir : {kForward, kBackward}) {
    scans[dir].Compose(all, 2 * size, dir * size, &start[dir], &final[dir]);
    if (!scans[dir].FirstInScanOrder()) scans[dir].Scan(&start[dir], acc);
    state->mamba[dir] = std::move(final[dir]);
  }
  return shard.Cancelled() ? cancelled : absl::OkStatus();
}

}  // namespace lact
