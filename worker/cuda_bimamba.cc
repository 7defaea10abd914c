// The BiMamba half of a CUDA block: the same schedule as bimamba_shard.cc
// (halo all-gather, summaries from the first-in-scan-order shard's real scan
// or a state-only pre-pass, composed carry-in, then the remaining scans),
// with the scans on the device and the small exchanges staged through host
// memory.
#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"
#include "worker/cuda_block.h"
#include "worker/shard_exchange.h"

namespace lact {
namespace {

MambaState ZeroLike(const MambaState& s) { return {Tensor(s.ssm.shape), Tensor(s.conv.shape)}; }

}  // namespace

absl::Status CudaBlock::UploadState(const MambaState& s) {
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ssm_.get(), s.ssm.ptr(), s.ssm.size() * sizeof(float), cudaMemcpyHostToDevice, stream()));
  if (s.conv.size() > 0) {
    LACT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(conv_.get(), s.conv.ptr(), s.conv.size() * sizeof(float), cudaMemcpyHostToDevice, stream()));
  }
  return ctx_.Synchronize();  // the host copies may go out of scope
}

absl::Status CudaBlock::DownloadState(MambaState* s) {
  LACT_RETURN_IF_ERROR(ctx_.Download(ssm_.get(), s->ssm.size(), s->ssm.ptr()));
  return ctx_.Download(conv_.get(), s->conv.size(), s->conv.ptr());
}

absl::Status CudaBlock::ScanTiles(const LayerWeights& w, Direction dir, bool outputs, float* log_decay) {
  const MambaDirWeights& m = w.mamba[dir];
  const int64_t D = c_.d_model, di = c_.d_inner(), C = c_.conv_channels(), R = c_.in_proj_rows();
  const int hs = c_.ssm_heads(), N = c_.ssm.d_state;
  for (int64_t done = 0; done < L_; done += tile_) {
    LACT_RETURN_IF_ERROR(CheckCancelled());
    const int64_t n = std::min(tile_, L_ - done);
    // This tile's first local row, and its normed rows in scan order.
    const int64_t first = dir == kForward ? done : L_ - done - n;
    const float* rows = h_.get() + first * D;
    if (dir == kBackward) {
      LACT_RETURN_IF_ERROR(cuda::ReverseRows(stream(), rows, rev_.get(), n, D));
      rows = rev_.get();
    }
    // The state-only pass needs no gate z: project the conv and dt rows only.
    const int64_t skip = outputs ? 0 : di;
    LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows, D, n, D, weights_(m.in_proj) + skip * D, R - skip,
                                      proj_.get() + skip, R));
    LACT_RETURN_IF_ERROR(cuda::ConvSilu(stream(), proj_.get() + di, R, n, C, c_.ssm.conv_width, weights_(m.conv_w),
                                        weights_(m.conv_b), conv_.get(), conv_scratch_.get(), xbc_.get(), C));
    LACT_RETURN_IF_ERROR(
        cuda::SoftplusBias(stream(), proj_.get() + di + C, R, n, hs, weights_(m.dt_bias), 0.0f, dt_.get(), hs));
    const float* xbc = xbc_.get();
    LACT_RETURN_IF_ERROR(cuda::SsdScan(stream(), ssd_, n, hs, c_.ssm.head_dim, N, xbc, C, xbc + di, C, xbc + di + N, C,
                                       dt_.get(), hs, weights_(m.a_log), weights_(m.d_skip),
                                       outputs ? y_.get() : nullptr, di, ssm_.get(), log_decay));
    if (!outputs) continue;
    LACT_RETURN_IF_ERROR(cuda::GatedRmsNormRows(stream(), y_.get(), di, proj_.get(), R, n, di, weights_(m.norm)));
    if (dir == kForward) {
      LACT_RETURN_IF_ERROR(
          cuda::Linear(ctx_, y_.get(), di, n, di, weights_(w.out_proj), D, acc_.get() + first * D, D, 1.0f));
    } else {
      LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, y_.get(), di, n, di, weights_(w.out_proj), D, a_.get(), D));
      LACT_RETURN_IF_ERROR(cuda::AddReversedRows(stream(), acc_.get() + first * D, a_.get(), n, D));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBlock::ExchangeHalo(Direction dir, const MambaDirWeights& m, MambaState* start, MambaState* final) {
  const int64_t D = c_.d_model, k = std::min<int64_t>(c_.ssm.conv_width - 1, L_);
  // The shard's last k normed rows in scan order: forward its last rows,
  // backward its first rows reversed.
  std::vector<float> tail(k * D);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t src = dir == kForward ? L_ - k + i : k - 1 - i;
    LACT_RETURN_IF_ERROR(ctx_.Download(h_.get() + src * D, D, tail.data() + i * D));
  }
  const int64_t size = HaloPacketSize(c_);
  std::vector<float> mine = HaloPacket(c_, m, tail.data(), k), all(size * shard_.sync->size());
  LACT_RETURN_IF_ERROR(shard_.sync->AllGather(mine.data(), size, all.data()));
  ComposeHalos(c_, dir, shard_.sync->rank(), shard_.sync->size(), all.data(), start, final);
  return absl::OkStatus();
}

absl::Status CudaBlock::BiMamba(const LayerWeights& w, bool is_context, LayerState* state) {
  LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(acc_.get(), 0, acc_.size() * sizeof(float), stream()));
  MambaState start[2], final[2];
  for (Direction dir : {kForward, kBackward}) {
    start[dir] = ZeroLike(state->mamba[dir]);
    final[dir] = ZeroLike(state->mamba[dir]);
  }
  // A query's forward direction continues from the context's state.
  if (!is_context) start[kForward] = state->mamba[kForward];
  if (!shard_.distributed()) {
    for (Direction dir : {kForward, kBackward}) {
      LACT_RETURN_IF_ERROR(UploadState(start[dir]));
      LACT_RETURN_IF_ERROR(ScanTiles(w, dir, /*outputs=*/true, nullptr));
      if (is_context) LACT_RETURN_IF_ERROR(DownloadState(&state->mamba[dir]));
    }
    return absl::OkStatus();
  }
  if (!is_context) return absl::InternalError("query sets run on one rank");
  for (Direction dir : {kForward, kBackward}) {
    LACT_RETURN_IF_ERROR(ExchangeHalo(dir, w.mamba[dir], &start[dir], &final[dir]));
  }
  // Each direction's summary, both in one all-gather.
  const int64_t size = SummarySize(c_), ranks = shard_.sync->size(), heads = c_.ssm_heads();
  std::vector<float> mine(2 * size), all(2 * size * ranks);
  for (Direction dir : {kForward, kBackward}) {
    const bool first = ScanPosition(dir, shard_.sync->rank(), shard_.sync->size()) == 0;
    LACT_RETURN_IF_ERROR(UploadState(start[dir]));
    LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(log_decay_.get(), 0, heads * sizeof(float), stream()));
    LACT_RETURN_IF_ERROR(ScanTiles(w, dir, /*outputs=*/first, log_decay_.get()));
    float* summary = mine.data() + dir * size;
    LACT_RETURN_IF_ERROR(ctx_.Download(log_decay_.get(), heads, summary));
    LACT_RETURN_IF_ERROR(ctx_.Download(ssm_.get(), size - heads, summary + heads));
  }
  LACT_RETURN_IF_ERROR(shard_.sync->AllGather(mine.data(), 2 * size, all.data()));
  for (Direction dir : {kForward, kBackward}) {
    ComposeSummaries(c_, dir, shard_.sync->rank(), shard_.sync->size(), all.data(), 2 * size, dir * size,
                     &start[dir], &final[dir]);
    if (ScanPosition(dir, shard_.sync->rank(), shard_.sync->size()) != 0) {
      LACT_RETURN_IF_ERROR(UploadState(start[dir]));
      LACT_RETURN_IF_ERROR(ScanTiles(w, dir, /*outputs=*/true, nullptr));
    }
    state->mamba[dir] = std::move(final[dir]);
  }
  return absl::OkStatus();
}

}  // namespace lact
