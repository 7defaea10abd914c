#include "worker/cpu_block.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/lact_ops.h"
#include "kernels/cpu/mamba_mixer.h"
#include "kernels/cpu/ssd_scan.h"
#include "worker/bimamba_shard.h"

namespace lact {
namespace {

using cpu::FastGradsRef;
using cpu::FastWeightsRef;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The LaCT part of a block over this shard: per global chunk, gradient sums
// over the shard's tokens in it, all-reduced, the update, then the updated
// fast weights applied to those tokens (acc += o @ o_proj^T).
class LactShard {
 public:
  LactShard(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile, const ShardContext& shard,
            const Tensor& h, LayerState* state)
      : c_(c), w_(w), is_context_(is_context), tile_(tile), shard_(shard), h_(h), state_(state) {
    chunk_ = is_context && c.ttt.chunk_tokens > 0 ? c.ttt.chunk_tokens : shard.total;
    const int64_t D = c.d_model;
    kv_.resize(tile * 2 * D);
    lr_.resize(tile * 3 * c.ttt_heads());
    q_.resize(tile * D);
    o_.resize(tile * D);
    grads_.resize(state->w0.size() + state->w1.size() + state->w2.size());
  }

  int64_t chunks() const { return (shard_.total + chunk_ - 1) / chunk_; }

  // Gradient sums of chunk k over the local tokens (zeros if none).
  void LocalGrads(int64_t k) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const auto [lo, hi] = LocalRange(k);
    const FastWeightsRef fast{state_->w0.ptr(), state_->w1.ptr(), state_->w2.ptr()};
    for (int64_t t0 = lo; t0 < hi && !shard_.Cancelled(); t0 += tile_) {
      const int64_t n = std::min(tile_, hi - t0);
      cpu::LactKeyValueLr(c_, w_, h_.ptr() + t0 * c_.d_model, n, kv_.data(), lr_.data());
      cpu::AccumulateFastWeightGrads(c_, kv_.data(), lr_.data(), n, fast, GradsRef(), &ws_);
    }
  }

  // Starts the all-reduce of the current gradients on its own thread.
  std::future<absl::Status> StartAllReduce(OverlapStats* stats) {
    return std::async(std::launch::async, [this, stats] {
      const auto start = Clock::now();
      absl::Status s = shard_.grads->AllReduceSum(grads_.data(), grads_.size());
      stats->allreduce_seconds += Seconds(Clock::now() - start);
      return s;
    });
  }

  void UpdateAndApply(int64_t k) {
    if (is_context_) {
      cpu::UpdateFastWeights(c_, GradsRef(), {w_.w0, w_.w1, w_.w2}, state_->w0.ptr(), state_->w1.ptr(),
                             state_->w2.ptr());
    }
    const FastWeightsRef fast{state_->w0.ptr(), state_->w1.ptr(), state_->w2.ptr()};
    const auto [lo, hi] = LocalRange(k);
    const int64_t D = c_.d_model, dh = c_.ttt.head_dim;
    for (int64_t t0 = lo; t0 < hi && !shard_.Cancelled(); t0 += tile_) {
      const int64_t n = std::min(tile_, hi - t0);
      cpu::LactQuery(c_, w_, h_.ptr() + t0 * D, n, q_.data());
      cpu::ApplyFastWeights(c_, q_.data(), n, fast, o_.data(), &ws_);
      for (int64_t head = 0; head < c_.ttt_heads(); ++head) {
        cpu::RmsNormRows(o_.data() + head * dh, D, n, dh, w_.o_norm, o_.data() + head * dh, D);
      }
      cpu::Linear(o_.data(), D, n, D, w_.o_proj, D, acc_->ptr() + t0 * D, D, 1.0f);
    }
  }

  void set_acc(Tensor* acc) { acc_ = acc; }

 private:
  // Chunk k's tokens in this shard, as local row indices [lo, hi).
  std::pair<int64_t, int64_t> LocalRange(int64_t k) const {
    const int64_t L = h_.dim(0);
    const int64_t lo = std::clamp(k * chunk_ - shard_.begin, int64_t{0}, L);
    const int64_t hi = std::clamp((k + 1) * chunk_ - shard_.begin, int64_t{0}, L);
    return {lo, hi};
  }
  FastGradsRef GradsRef() {
    float* g = grads_.data();
    return {g, g + state_->w0.size(), g + state_->w0.size() + state_->w1.size()};
  }

  const ModelConfig& c_;
  const LayerWeights& w_;
  bool is_context_;
  int64_t tile_;
  const ShardContext& shard_;
  const Tensor& h_;
  LayerState* state_;
  Tensor* acc_ = nullptr;
  int64_t chunk_;
  cpu::LactWorkspace ws_;
  std::vector<float> kv_, lr_, q_, o_, grads_;
};

absl::Status Wait(std::future<absl::Status>& pending, OverlapStats* stats) {
  const auto start = Clock::now();
  absl::Status status = pending.get();
  stats->waited_seconds += Seconds(Clock::now() - start);
  return status;
}

// x += acc; x += SwiGLU-MLP(rmsnorm(x, norm2)), tile by tile.
void ResidualMlp(const ModelConfig& c, const LayerWeights& w, int64_t tile, const ShardContext& shard,
                 const Tensor& acc, Tensor* x) {
  const int64_t L = x->dim(0), D = c.d_model, F = c.mlp_hidden;
  std::vector<float> g(tile * D), gate(tile * F), up(tile * F);
  for (int64_t t0 = 0; t0 < L && !shard.Cancelled(); t0 += tile) {
    const int64_t n = std::min(tile, L - t0);
    float* xt = x->ptr() + t0 * D;
    const float* at = acc.ptr() + t0 * D;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * D; ++i) xt[i] += at[i];
    cpu::RmsNormRows(xt, D, n, D, w.norm2, g.data(), D);
    cpu::Linear(g.data(), D, n, D, w.mlp_gate, F, gate.data(), F);
    cpu::Linear(g.data(), D, n, D, w.mlp_up, F, up.data(), F);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * F; ++i) gate[i] = cpu::Silu(gate[i]) * up[i];
    cpu::Linear(gate.data(), F, n, F, w.mlp_down, D, xt, D, 1.0f);
  }
}

}  // namespace

absl::Status RunBlockCpu(const ModelConfig& c, const LayerWeights& w, bool is_context, int64_t tile,
                         const ShardContext& shard, Tensor* x, BlockBuffers* buffers, LayerState* state,
                         OverlapStats* stats) {
  const int64_t L = x->dim(0), D = c.d_model;
  buffers->h.shape = {L, D};
  buffers->h.data.resize(L * D);
  buffers->acc.shape = {L, D};
  buffers->acc.data.resize(L * D);
  cpu::RmsNormRows(x->ptr(), D, L, D, w.norm1, buffers->h.ptr(), D);
  const bool distributed = shard.sync->size() > 1;

  if (is_context) {
    std::copy_n(w.w0, state->w0.size(), state->w0.ptr());
    std::copy_n(w.w1, state->w1.size(), state->w1.ptr());
    std::copy_n(w.w2, state->w2.size(), state->w2.ptr());
  }
  LactShard lact(c, w, is_context, tile, shard, buffers->h, state);
  lact.set_acc(&buffers->acc);
  // Chunk 0's gradients first, so their all-reduce overlaps the scans.
  std::future<absl::Status> pending;
  if (is_context) {
    lact.LocalGrads(0);
    if (distributed) pending = lact.StartAllReduce(stats);
  }
  absl::Status scans = RunBiMambaShard(c, w, is_context, tile, shard, buffers->h, &buffers->acc, state);
  if (pending.valid()) LACT_RETURN_IF_ERROR(Wait(pending, stats));
  LACT_RETURN_IF_ERROR(scans);
  lact.UpdateAndApply(0);
  for (int64_t k = 1; k < lact.chunks() && !shard.Cancelled(); ++k) {
    lact.LocalGrads(k);
    if (distributed) {
      std::future<absl::Status> reduce = lact.StartAllReduce(stats);  // nothing to overlap with
      LACT_RETURN_IF_ERROR(Wait(reduce, stats));
    }
    lact.UpdateAndApply(k);
  }
  ResidualMlp(c, w, tile, shard, buffers->acc, x);
  return shard.Cancelled() ? absl::CancelledError("the job was cancelled") : absl::OkStatus();
}

}  // namespace lact
