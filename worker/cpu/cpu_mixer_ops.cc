#include "worker/cpu/cpu_mixer_ops.h"

#include <algorithm>
#include <type_traits>

#include "common/half.h"
#include "common/huge_pages.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/threading.h"

namespace lact {

CpuMixerOps::CpuMixerOps(const ModelConfig& c, const CpuPrecision& precision, CpuActivations& rows,
                         int64_t tokens, int64_t tile)
    : c_(c),
      precision_(precision),
      rows_(rows),
      tokens_(tokens),
      tile_(tile),
      log_decay_(c.ssm_heads()) {}

void CpuMixerOps::LoadScanState(const MambaState& state) {
  scan_ = state;
  std::fill(log_decay_.begin(), log_decay_.end(), 0.0f);
}

void CpuMixerOps::StoreScanState(MambaState* state, float* log_decay) const {
  *state = scan_;
  if (log_decay != nullptr) std::copy(log_decay_.begin(), log_decay_.end(), log_decay);
}

cpu::MixerStateView CpuMixerOps::State() { return {scan_.ssm.ptr(), scan_.conv.ptr()}; }

void CpuMixerOps::Tile(const LayerWeights& w, Direction dir, int64_t first, int64_t n, bool outputs,
                       bool summarize) {
  rows_.WithNormed(precision_, first, n, &normed_,
                   [&](const auto* h) { TileOf(h, w, dir, first, n, outputs, summarize); });
}

template <typename T>
void CpuMixerOps::TileOf(const T* h, const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                         bool outputs, bool summarize) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  const int64_t D = c_.d_model, di = c_.d_inner();
  std::vector<T>* reversed;
  std::vector<T>* y;
  if constexpr (kBf16) {
    reversed = &reversed16_;
    y = &y16_;
  } else {
    reversed = &reversed_;
    y = &y_;
  }
  const T* rows = ScanOrder(h, dir, n, reversed);
  const MambaDirWeights& m = w.mamba[dir];
  if (!outputs) {
    if constexpr (kBf16) {  // the pre-pass, on h widened (exactly) to float32
      GrowTo(&reversed_, tile_ * D);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n * D; ++i) reversed_[i] = BFloat16ToFloat(rows[i]);
      Summarize(m, reversed_.data(), n, summarize);
    } else {
      Summarize(m, rows, n, summarize);
    }
    return;
  }
  GrowTo(y, tile_ * di);
  cpu::MambaMixerSegment(c_, m, rows, n, State(), &mixer_ws_, y->data(),
                         summarize ? log_decay_.data() : nullptr, precision_.operands());
  if (precision_.rounds()) {
    ProjectEach(w, y->data(), dir, first, n);
    return;
  }
  if (held_dir_ < 0) held_dir_ = dir;
  if (dir == held_dir_) {
    HoldOutputs(dir, first, n);
  } else {
    ProjectSum(w, dir, first, n);
  }
}

template <typename T>
const T* CpuMixerOps::ScanOrder(const T* rows, Direction dir, int64_t n, std::vector<T>* buffer) {
  if (dir != kBackward) return rows;
  const int64_t D = c_.d_model;
  GrowTo(buffer, tile_ * D);
  T* out = buffer->data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) std::copy_n(rows + (n - 1 - i) * D, D, out + i * D);
  return out;
}

void CpuMixerOps::Summarize(const MambaDirWeights& m, const float* rows, int64_t n,
                            bool summarize) {
  // The pre-pass always sums the decay; a caller that did not ask for it
  // gets it summed elsewhere.
  std::vector<float> unasked(summarize ? 0 : log_decay_.size());
  cpu::MambaSummarySegment(c_, m, rows, n, State(), summarize ? log_decay_.data() : unasked.data(),
                           &mixer_ws_, precision_.operands());
}

template <typename T>
void CpuMixerOps::ProjectEach(const LayerWeights& w, T* y, Direction dir, int64_t first,
                              int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  const auto project = [&](float* out, float beta) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      cpu::Linear(y, n, di, w.out_proj, D, out, D, beta, precision_.operands());
    } else {
      cpu::Linear(y, di, n, di, w.out_proj, D, out, D, beta, precision_.operands());
    }
  };
  if constexpr (std::is_same_v<T, float>) precision_.RoundOperand(y, di, n, di);
  float* acc = rows_.acc->ptr() + first * D;
  if (dir == kForward) {
    project(acc, 1.0f);
    return;
  }
  GrowTo(&summed_, tile_ * D);
  project(summed_.data(), 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* dst = acc + (n - 1 - i) * D;
    const float* src = summed_.data() + i * D;
    for (int64_t k = 0; k < D; ++k) dst[k] += src[k];
  }
}

void CpuMixerOps::ProjectSum(const LayerWeights& w, Direction dir, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  GrowTo(&summed_, tile_ * di);
  float* sum = summed_.data();
  const int64_t low = std::min(D, di), high = di - low;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* mine = OutputRow(dir, n, j);
    const float* held_low = rows_.acc->ptr() + (first + j) * D;
    const float* held_high = held_high_.data() + (first + j) * high;
    float* out = sum + j * di;
    for (int64_t k = 0; k < low; ++k) out[k] = held_low[k] + mine[k];
    for (int64_t k = 0; k < high; ++k) out[low + k] = held_high[k] + mine[low + k];
  }
  cpu::Linear(sum, di, n, di, w.out_proj, D, rows_.acc->ptr() + first * D, D, 0.0f,
              precision_.operands());
}

const float* CpuMixerOps::OutputRow(Direction dir, int64_t n, int64_t j) const {
  return y_.data() + (dir == kForward ? j : n - 1 - j) * c_.d_inner();
}

void CpuMixerOps::HoldOutputs(Direction dir, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  const int64_t low = std::min(D, di), high = di - low;
  GrowHugePages(&held_high_, tokens_ * high, cpu::FaultInPages);
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* row = OutputRow(dir, n, j);
    std::copy_n(row, low, rows_.acc->ptr() + (first + j) * D);
    std::copy_n(row + low, high, held_high_.data() + (first + j) * high);
  }
}

}  // namespace lact
