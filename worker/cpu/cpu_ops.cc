#include "worker/cpu/cpu_ops.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <utility>

#include "common/half.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

namespace lact {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Grow(std::vector<float>* v, int64_t size) {
  if (static_cast<int64_t>(v->size()) < size) v->resize(size);
}

}  // namespace

CpuOps::CpuOps(const Model& model, const ModelConfig& c, int64_t tokens, int64_t tile,
               Collective* grads, OverlapStats* stats, cpu::Operands operands,
               cpu::PackedWeights* packed)
    : BackendOps(tokens, tile),
      model_(model),
      c_(c),
      grads_collective_(grads),
      stats_(stats),
      operands_(operands.With(&bf16_copies_, packed != nullptr ? packed : &own_packed_)),
      bits_(operands.bf16() && cpu::Bf16MatmulOn()),
      log_decay_(c.ssm_heads()),
      fast_(3 * FastSize()),
      grads_(3 * FastSize()) {
  if (operands_ == cpu::Operands::kBf16) fast_bf16_.resize(fast_.size());
}

CpuOps::~CpuOps() {
  if (reducing_.valid()) reducing_.wait();
}

int64_t CpuOps::FastSize() const {
  return int64_t{c_.ttt_heads()} * c_.fast_hidden() * c_.ttt.head_dim;
}

cpu::FastWeightsRef CpuOps::Fast() const {
  const float* w = operands_ == cpu::Operands::kBf16 ? fast_bf16_.data() : fast_.data();
  return {w, w + FastSize(), w + 2 * FastSize()};
}

void CpuOps::RoundFastWeights() {
  if (operands_ != cpu::Operands::kBf16) return;
  std::copy(fast_.begin(), fast_.end(), fast_bf16_.begin());
  const int64_t size = static_cast<int64_t>(fast_bf16_.size());
  cpu::RoundRowsToBf16(fast_bf16_.data(), 0, 1, size);
  bf16_copies_.Put(fast_bf16_.data(), size);
}

void CpuOps::RoundOperand(float* x, int64_t ld, int64_t n, int64_t cols) const {
  if (operands_ == cpu::Operands::kBf16) cpu::RoundForBf16Gemm(x, ld, n, cols);
}

cpu::FastGradsRef CpuOps::Grads() {
  float* g = grads_.data();
  return {g, g + FastSize(), g + 2 * FastSize()};
}

void CpuOps::GrowSlices() {
  const size_t threads = static_cast<size_t>(cpu::NumThreads());
  if (slices_.size() < threads) slices_.resize(threads);
}

absl::Status CpuOps::LoadTokens(Tensor tokens) {
  const int64_t L = tokens.dim(0), D = c_.d_model;
  if (model_.embed() != nullptr) {
    RoundOperand(tokens.ptr(), c_.d_input, L, c_.d_input);
    x_ = Tensor({L, D});
    cpu::Linear(tokens.ptr(), c_.d_input, L, c_.d_input, model_.embed(), D, x_.ptr(), D, 0.0f,
                operands_);
  } else {
    x_ = std::move(tokens);
  }
  if (bits_) {
    h16_.resize(L * D);
  } else {
    h_ = Tensor({L, D});
  }
  acc_ = Tensor({L, D});
  return absl::OkStatus();
}

absl::Status CpuOps::OutputRows(int64_t first, int64_t n, float* out) {
  const int64_t D = c_.d_model;
  const float* x = x_.ptr() + first * D;
  if (model_.head() == nullptr) {
    cpu::RmsNormRows(x, D, n, D, model_.final_norm(), out, D);
    return absl::OkStatus();
  }
  // h is free once the block's mixers have run.
  if (bits_) Grow(&final_normed_, n * D);
  float* normed = bits_ ? final_normed_.data() : h_.ptr() + first * D;
  cpu::RmsNormRows(x, D, n, D, model_.final_norm(), normed, D);
  RoundOperand(normed, D, n, D);
  cpu::Linear(normed, D, n, D, model_.head(), c_.d_output, out, c_.d_output, 0.0f, operands_);
  return absl::OkStatus();
}

absl::Status CpuOps::ReadRows(Activation a, int64_t first, int64_t n, float* out) {
  if (a == Activation::kNormed && bits_) {
    const uint16_t* h = h16_.data() + first * c_.d_model;
    for (int64_t i = 0; i < n * c_.d_model; ++i) out[i] = BFloat16ToFloat(h[i]);
    return absl::OkStatus();
  }
  const Tensor& rows = a == Activation::kResidual ? x_ : a == Activation::kNormed ? h_ : acc_;
  std::copy_n(rows.ptr() + first * c_.d_model, n * c_.d_model, out);
  // h as its GEMMs take it: rounded in the bf16 mode (RoundOperand may have
  // left that to the bf16 matmul).
  if (a == Activation::kNormed && operands_ == cpu::Operands::kBf16) {
    cpu::RoundRowsToBf16(out, c_.d_model, n, c_.d_model);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::BeginBlock(const LayerWeights& w) {
  const int64_t L = tokens(), D = c_.d_model;
  if (bits_) {
    cpu::RmsNormRowsToBf16(x_.ptr(), D, L, D, w.norm1, h16_.data());
  } else {
    cpu::RmsNormRows(x_.ptr(), D, L, D, w.norm1, h_.ptr(), D);
    RoundOperand(h_.ptr(), D, L, D);  // h is read by GEMMs only
  }
  std::fill(acc_.data.begin(), acc_.data.end(), 0.0f);
  held_dir_ = -1;
  return absl::OkStatus();
}

absl::Status CpuOps::LoadScanState(const MambaState& state) {
  scan_ = state;
  std::fill(log_decay_.begin(), log_decay_.end(), 0.0f);
  return absl::OkStatus();
}

absl::Status CpuOps::StoreScanState(MambaState* state, float* log_decay) {
  *state = scan_;
  if (log_decay != nullptr) std::copy(log_decay_.begin(), log_decay_.end(), log_decay);
  return absl::OkStatus();
}

absl::Status CpuOps::MixerTile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                               bool outputs, bool summarize) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  if (bits_) return MixerTileBits(w, dir, first, n, outputs, summarize);
  const float* rows = h_.ptr() + first * D;
  if (dir == kBackward) {
    Grow(&reversed_, tile() * D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(rows + (n - 1 - i) * D, D, reversed_.data() + i * D);
    rows = reversed_.data();
  }
  const MambaDirWeights& m = w.mamba[dir];
  const cpu::MixerStateView state{scan_.ssm.ptr(), scan_.conv.ptr()};
  if (!outputs) {
    // The pre-pass always sums the decay; a caller that did not ask for it
    // gets it summed elsewhere.
    std::vector<float> unasked(summarize ? 0 : log_decay_.size());
    cpu::MambaSummarySegment(c_, m, rows, n, state, summarize ? log_decay_.data() : unasked.data(),
                             &mixer_ws_, operands_);
    return absl::OkStatus();
  }
  Grow(&y_, tile() * di);
  cpu::MambaMixerSegment(c_, m, rows, n, state, &mixer_ws_, y_.data(),
                         summarize ? log_decay_.data() : nullptr, operands_);
  if (operands_ == cpu::Operands::kBf16) {
    ProjectEach(w, dir, first, n);
    return absl::OkStatus();
  }
  if (held_dir_ < 0) held_dir_ = dir;
  if (dir == held_dir_) {
    HoldOutputs(dir, first, n);
  } else {
    ProjectSum(w, dir, first, n);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::MixerTileBits(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                                   bool outputs, bool summarize) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  const uint16_t* rows = h16_.data() + first * D;
  if (dir == kBackward) {
    if (static_cast<int64_t>(reversed16_.size()) < tile() * D) reversed16_.resize(tile() * D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(rows + (n - 1 - i) * D, D, reversed16_.data() + i * D);
    rows = reversed16_.data();
  }
  const MambaDirWeights& m = w.mamba[dir];
  const cpu::MixerStateView state{scan_.ssm.ptr(), scan_.conv.ptr()};
  if (!outputs) {  // the pre-pass, on h widened (exactly) to float32
    Grow(&reversed_, tile() * D);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * D; ++i) reversed_[i] = BFloat16ToFloat(rows[i]);
    std::vector<float> unasked(summarize ? 0 : log_decay_.size());
    cpu::MambaSummarySegment(c_, m, reversed_.data(), n, state,
                             summarize ? log_decay_.data() : unasked.data(), &mixer_ws_, operands_);
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(y16_.size()) < tile() * di) y16_.resize(tile() * di);
  cpu::MambaMixerSegment(c_, m, rows, n, state, &mixer_ws_, y16_.data(),
                         summarize ? log_decay_.data() : nullptr, operands_);
  ProjectEach(w, dir, first, n);
  return absl::OkStatus();
}

void CpuOps::ProjectEach(const LayerWeights& w, Direction dir, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  const auto project = [&](float* out, float beta) {
    if (bits_) {
      cpu::Linear(y16_.data(), n, di, w.out_proj, D, out, D, beta, operands_);
    } else {
      cpu::Linear(y_.data(), di, n, di, w.out_proj, D, out, D, beta, operands_);
    }
  };
  if (!bits_) RoundOperand(y_.data(), di, n, di);
  float* acc = acc_.ptr() + first * D;
  if (dir == kForward) {
    project(acc, 1.0f);
    return;
  }
  Grow(&summed_, tile() * D);
  project(summed_.data(), 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* dst = acc + (n - 1 - i) * D;
    const float* src = summed_.data() + i * D;
    for (int64_t k = 0; k < D; ++k) dst[k] += src[k];
  }
}

void CpuOps::ProjectSum(const LayerWeights& w, Direction dir, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  Grow(&summed_, tile() * di);
  float* sum = summed_.data();
  const int64_t low = std::min(D, di), high = di - low;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* mine = OutputRow(dir, n, j);
    const float* held_low = acc_.ptr() + (first + j) * D;
    const float* held_high = held_high_.data() + (first + j) * high;
    float* out = sum + j * di;
    for (int64_t k = 0; k < low; ++k) out[k] = held_low[k] + mine[k];
    for (int64_t k = 0; k < high; ++k) out[low + k] = held_high[k] + mine[low + k];
  }
  cpu::Linear(sum, di, n, di, w.out_proj, D, acc_.ptr() + first * D, D, 0.0f, operands_);
}

const float* CpuOps::OutputRow(Direction dir, int64_t n, int64_t j) const {
  return y_.data() + (dir == kForward ? j : n - 1 - j) * c_.d_inner();
}

void CpuOps::HoldOutputs(Direction dir, int64_t first, int64_t n) {
  const int64_t D = c_.d_model, di = c_.d_inner();
  const int64_t low = std::min(D, di), high = di - low;
  Grow(&held_high_, tokens() * high);
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* row = OutputRow(dir, n, j);
    std::copy_n(row, low, acc_.ptr() + (first + j) * D);
    std::copy_n(row + low, high, held_high_.data() + (first + j) * high);
  }
}

absl::Status CpuOps::LoadFastWeights(const LayerWeights& w, const LayerState* retained) {
  const float* from[3] = {w.w0, w.w1, w.w2};
  if (retained != nullptr) {
    from[0] = retained->w0.ptr();
    from[1] = retained->w1.ptr();
    from[2] = retained->w2.ptr();
  }
  for (int m = 0; m < 3; ++m) std::copy_n(from[m], FastSize(), fast_.data() + m * FastSize());
  RoundFastWeights();
  return absl::OkStatus();
}

absl::Status CpuOps::StoreFastWeights(LayerState* state) {
  Tensor* to[3] = {&state->w0, &state->w1, &state->w2};
  for (int m = 0; m < 3; ++m) std::copy_n(fast_.data() + m * FastSize(), FastSize(), to[m]->ptr());
  return absl::OkStatus();
}

absl::Status CpuOps::ZeroGrads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  for (SliceScratch& s : slices_) s.grads_live = false;
  return absl::OkStatus();
}

void CpuOps::AccumulateRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s,
                            cpu::FastGradsRef grads) {
  const int64_t D = c_.d_model;
  Grow(&s->kv, n * 2 * D);
  Grow(&s->lr, n * 3 * c_.ttt_heads());
  if (bits_) {
    cpu::LactKeyValueLr(c_, w, h16_.data() + first * D, n, s->kv.data(), s->lr.data(), operands_);
  } else {
    cpu::LactKeyValueLr(c_, w, h_.ptr() + first * D, n, s->kv.data(), s->lr.data(), operands_);
  }
  RoundOperand(s->kv.data(), 2 * D, n, 2 * D);
  cpu::AccumulateFastWeightGrads(c_, s->kv.data(), s->lr.data(), n, Fast(), grads, &s->lact,
                                 operands_);
}

absl::Status CpuOps::AccumulateGrads(const LayerWeights& w, int64_t first, int64_t n) {
  GrowSlices();
  const int64_t size = FastSize();
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    SliceScratch& s = slices_[slot];
    cpu::FastGradsRef grads = Grads();
    if (slot > 0) {
      if (!s.grads_live) s.grads.assign(3 * size, 0.0f);
      s.grads_live = true;
      grads = {s.grads.data(), s.grads.data() + size, s.grads.data() + 2 * size};
    }
    AccumulateRows(w, first + begin, k, &s, grads);
  });
  return absl::OkStatus();
}

void CpuOps::FoldSliceGrads() {
  std::vector<const float*> live;
  for (SliceScratch& s : slices_) {
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

absl::Status CpuOps::StartGradAllReduce() {
  if (grads_collective_ == nullptr)
    return absl::InternalError("no gradient all-reduce in a group of one");
  FoldSliceGrads();
  reducing_ = std::async(std::launch::async, [this] {
    const auto start = Clock::now();
    absl::Status s = grads_collective_->AllReduceSum(grads_.data(), grads_.size());
    stats_->allreduce_seconds += Seconds(Clock::now() - start);
    return s;
  });
  return absl::OkStatus();
}

absl::Status CpuOps::FinishGradAllReduce() {
  if (!reducing_.valid()) return absl::InternalError("no gradient all-reduce in flight");
  const auto start = Clock::now();
  absl::Status status = reducing_.get();
  stats_->waited_seconds += Seconds(Clock::now() - start);
  return status;
}

absl::Status CpuOps::UpdateFastWeights(const LayerWeights& w) {
  FoldSliceGrads();
  float* f = fast_.data();
  cpu::UpdateFastWeights(c_, Grads(), {w.w0, w.w1, w.w2}, f, f + FastSize(), f + 2 * FastSize());
  RoundFastWeights();
  return absl::OkStatus();
}

void CpuOps::ApplyRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s) {
  const int64_t D = c_.d_model, dh = c_.ttt.head_dim;
  Grow(&s->q, n * D);
  Grow(&s->o, n * D);
  float *q = s->q.data(), *o = s->o.data();
  if (bits_) {
    cpu::LactQuery(c_, w, h16_.data() + first * D, n, q, operands_);
  } else {
    cpu::LactQuery(c_, w, h_.ptr() + first * D, n, q, operands_);
  }
  RoundOperand(q, D, n, D);
  cpu::ApplyFastWeights(c_, q, n, Fast(), o, &s->lact, operands_);
  for (int64_t head = 0; head < c_.ttt_heads(); ++head) {
    cpu::RmsNormRows(o + head * dh, D, n, dh, w.o_norm, o + head * dh, D);
  }
  RoundOperand(o, D, n, D);
  cpu::Linear(o, D, n, D, w.o_proj, D, acc_.ptr() + first * D, D, 1.0f, operands_);
}

absl::Status CpuOps::ApplyFastWeights(const LayerWeights& w, int64_t first, int64_t n) {
  GrowSlices();
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    ApplyRows(w, first + begin, k, &slices_[slot]);
  });
  return absl::OkStatus();
}

void CpuOps::MlpRows(const LayerWeights& w, int64_t first, int64_t n, SliceScratch* s) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  Grow(&s->gate, n * F);
  Grow(&s->up, n * F);
  float *x = x_.ptr() + first * D, *gate = s->gate.data();
  const float* acc = acc_.ptr() + first * D;
  const float* up = s->up.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n * D; ++i) x[i] += acc[i];
  if (bits_) {
    if (static_cast<int64_t>(s->normed16.size()) < n * D) s->normed16.resize(n * D);
    cpu::RmsNormRowsToBf16(x, D, n, D, w.norm2, s->normed16.data());
    cpu::Linear(s->normed16.data(), n, D, w.mlp_gate, F, gate, F, 0.0f, operands_);
    cpu::Linear(s->normed16.data(), n, D, w.mlp_up, F, s->up.data(), F, 0.0f, operands_);
  } else {
    Grow(&s->normed, n * D);  // the normed rows as float32 (bits_ makes them as bf16)
    float* normed = s->normed.data();
    cpu::RmsNormRows(x, D, n, D, w.norm2, normed, D);
    RoundOperand(normed, D, n, D);
    cpu::Linear(normed, D, n, D, w.mlp_gate, F, gate, F, 0.0f, operands_);
    cpu::Linear(normed, D, n, D, w.mlp_up, F, s->up.data(), F, 0.0f, operands_);
  }
  if (bits_) {
    // The hidden rows made as bf16 (the down projection's operand), not
    // written as float32 for the matmul to read and round.
    if (static_cast<int64_t>(s->hidden16.size()) < n * F) s->hidden16.resize(n * F);
    uint16_t* hidden = s->hidden16.data();
    cpu::ParallelForEachVector(n * F, [&](int64_t i, auto like) {
      cpu::Put(cpu::SiluOf(cpu::LoadLike(like, gate + i)) * cpu::LoadLike(like, up + i),
               hidden + i);
    });
    if (operands_.packed()->LinearBf16(hidden, n, F, w.mlp_down, D, x, D, 1.0f)) return;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * F; ++i) {  // declined: the same values as float32, exactly
      gate[i] = std::bit_cast<float>(static_cast<uint32_t>(hidden[i]) << 16);
    }
  } else {
    cpu::ParallelForEachVector(n * F, [&](int64_t i, auto like) {
      cpu::Put(cpu::SiluOf(cpu::LoadLike(like, gate + i)) * cpu::LoadLike(like, up + i), gate + i);
    });
    RoundOperand(gate, F, n, F);
  }
  cpu::Linear(gate, F, n, F, w.mlp_down, D, x, D, 1.0f, operands_);
}

absl::Status CpuOps::ResidualMlp(const LayerWeights& w, int64_t first, int64_t n) {
  GrowSlices();
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    MlpRows(w, first + begin, k, &slices_[slot]);
  });
  return absl::OkStatus();
}

}  // namespace lact
