#include "worker/cpu/cpu_lact_ops.h"

#include <algorithm>
#include <chrono>

#include "common/timing.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"

namespace lact {

CpuLactOps::CpuLactOps(const ModelConfig& c, CpuPrecision& precision, CpuActivations& rows,
                       Collective* grads, OverlapStats* stats)
    : c_(c),
      precision_(precision),
      rows_(rows),
      grads_collective_(grads),
      stats_(stats),
      fast_(3 * FastSize()),
      grads_(3 * FastSize()) {
  if (precision_.rounds()) fast_bf16_.resize(fast_.size());
}

CpuLactOps::~CpuLactOps() {
  if (reducing_.valid()) reducing_.wait();
}

int64_t CpuLactOps::FastSize() const {
  return int64_t{c_.ttt_heads()} * c_.fast_hidden() * c_.ttt.head_dim;
}

cpu::FastWeightsRef CpuLactOps::Fast() const {
  const float* w = precision_.rounds() ? fast_bf16_.data() : fast_.data();
  return {w, w + FastSize(), w + 2 * FastSize()};
}

void CpuLactOps::RoundFastWeights() {
  if (!precision_.rounds()) return;
  std::copy(fast_.begin(), fast_.end(), fast_bf16_.begin());
  const int64_t size = static_cast<int64_t>(fast_bf16_.size());
  cpu::RoundRowsToBf16(fast_bf16_.data(), 0, 1, size);
  precision_.bf16_copies().Put(fast_bf16_.data(), size);
}

cpu::FastGradsRef CpuLactOps::Grads() {
  float* g = grads_.data();
  return {g, g + FastSize(), g + 2 * FastSize()};
}

void CpuLactOps::GrowSlices() {
  const size_t threads = static_cast<size_t>(cpu::NumThreads());
  if (slices_.size() < threads) slices_.resize(threads);
}

void CpuLactOps::Load(const LayerWeights& w, const LayerState* retained) {
  const float* from[3] = {w.w0, w.w1, w.w2};
  if (retained != nullptr) {
    from[0] = retained->w0.ptr();
    from[1] = retained->w1.ptr();
    from[2] = retained->w2.ptr();
  }
  for (int m = 0; m < 3; ++m) std::copy_n(from[m], FastSize(), fast_.data() + m * FastSize());
  RoundFastWeights();
}

void CpuLactOps::Store(LayerState* state) const {
  Tensor* to[3] = {&state->w0, &state->w1, &state->w2};
  for (int m = 0; m < 3; ++m) std::copy_n(fast_.data() + m * FastSize(), FastSize(), to[m]->ptr());
}

void CpuLactOps::ZeroGrads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  for (Slice& s : slices_) s.grads_live = false;
}

void CpuLactOps::AccumulateRows(const LayerWeights& w, int64_t first, int64_t n, Slice* s,
                                cpu::FastGradsRef grads) {
  const int64_t D = c_.d_model;
  GrowTo(&s->kv, n * 2 * D);
  GrowTo(&s->lr, n * 3 * c_.ttt_heads());
  rows_.WithNormed(precision_, first, n, &s->normed, [&](const auto* h) {
    cpu::LactKeyValueLr(c_, w, h, n, s->kv.data(), s->lr.data(), precision_.operands());
  });
  precision_.RoundOperand(s->kv.data(), 2 * D, n, 2 * D);
  cpu::AccumulateFastWeightGrads(c_, s->kv.data(), s->lr.data(), n, Fast(), grads, &s->lact,
                                 precision_.operands());
}

void CpuLactOps::Accumulate(const LayerWeights& w, int64_t first, int64_t n) {
  GrowSlices();
  const int64_t size = FastSize();
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    Slice& s = slices_[slot];
    cpu::FastGradsRef grads = Grads();
    if (slot > 0) {
      if (!s.grads_live) s.grads.assign(3 * size, 0.0f);
      s.grads_live = true;
      grads = {s.grads.data(), s.grads.data() + size, s.grads.data() + 2 * size};
    }
    AccumulateRows(w, first + begin, k, &s, grads);
  });
}

void CpuLactOps::FoldSliceGrads() {
  std::vector<const float*> live;
  for (Slice& s : slices_) {
    if (s.grads_live) live.push_back(s.grads.data());
    s.grads_live = false;
  }
  if (live.empty()) return;
  float* total = grads_.data();
  const int64_t size = static_cast<int64_t>(grads_.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < size; ++i) {
    for (const float* part : live) total[i] += part[i];
  }
}

absl::Status CpuLactOps::StartAllReduce() {
  if (grads_collective_ == nullptr)
    return absl::InternalError("no gradient all-reduce in a group of one");
  FoldSliceGrads();
  reducing_ = std::async(std::launch::async, [this] {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = grads_collective_->AllReduceSum(grads_.data(), grads_.size());
    stats_->allreduce_seconds += SecondsSince(start);
    return s;
  });
  return absl::OkStatus();
}

absl::Status CpuLactOps::FinishAllReduce() {
  if (!reducing_.valid()) return absl::InternalError("no gradient all-reduce in flight");
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = reducing_.get();
  stats_->waited_seconds += SecondsSince(start);
  return status;
}

void CpuLactOps::Update(const LayerWeights& w) {
  FoldSliceGrads();
  float* f = fast_.data();
  cpu::UpdateFastWeights(c_, Grads(), {w.w0, w.w1, w.w2}, f, f + FastSize(), f + 2 * FastSize());
  RoundFastWeights();
}

void CpuLactOps::ApplyRows(const LayerWeights& w, int64_t first, int64_t n, Slice* s) {
  const int64_t D = c_.d_model, dh = c_.ttt.head_dim;
  GrowTo(&s->q, n * D);
  GrowTo(&s->o, n * D);
  float *q = s->q.data(), *o = s->o.data();
  rows_.WithNormed(precision_, first, n, &s->normed,
                   [&](const auto* h) { cpu::LactQuery(c_, w, h, n, q, precision_.operands()); });
  precision_.RoundOperand(q, D, n, D);
  cpu::ApplyFastWeights(c_, q, n, Fast(), o, &s->lact, precision_.operands());
  for (int64_t head = 0; head < c_.ttt_heads(); ++head) {
    cpu::RmsNormRows(o + head * dh, D, n, dh, w.o_norm, o + head * dh, D);
  }
  precision_.RoundOperand(o, D, n, D);
  cpu::Linear(o, D, n, D, w.o_proj, D, rows_.acc->ptr() + first * D, D, 1.0f,
              precision_.operands());
}

void CpuLactOps::Apply(const LayerWeights& w, int64_t first, int64_t n) {
  GrowSlices();
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    ApplyRows(w, first + begin, k, &slices_[slot]);
  });
}

}  // namespace lact
