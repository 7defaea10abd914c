#include "worker/cpu/cpu_mlp_ops.h"

#include <bit>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/threading.h"

namespace lact {

void CpuMlpOps::Residual(const LayerWeights& w, int64_t first, int64_t n) {
  const size_t threads = static_cast<size_t>(cpu::NumThreads());
  if (slices_.size() < threads) slices_.resize(threads);
  cpu::ForRowSlices(n, cpu::kMinSliceRows, [&](int64_t begin, int64_t k, int slot) {
    Rows(w, first + begin, k, &slices_[slot]);
  });
}

void CpuMlpOps::Rows(const LayerWeights& w, int64_t first, int64_t n, Slice* s) {
  const int64_t D = c_.d_model;
  float* x = rows_.x.ptr() + first * D;
  const float* acc = rows_.acc->ptr() + first * D;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n * D; ++i) x[i] += acc[i];
  GateUp(w, x, n, s);
  Down(w, x, n, s);
}

void CpuMlpOps::GateUp(const LayerWeights& w, const float* x, int64_t n, Slice* s) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  GrowTo(&s->gate, n * F);
  GrowTo(&s->up, n * F);
  const cpu::Operands& ops = precision_.operands();
  if (precision_.makes_bf16()) {
    GrowTo(&s->normed16, n * D);
    cpu::RmsNormRowsToBf16(x, D, n, D, w.norm2, s->normed16.data());
    cpu::Linear(s->normed16.data(), n, D, w.mlp_gate, F, s->gate.data(), F, 0.0f, ops);
    cpu::Linear(s->normed16.data(), n, D, w.mlp_up, F, s->up.data(), F, 0.0f, ops);
    return;
  }
  GrowTo(&s->normed, n * D);
  float* normed = s->normed.data();
  cpu::RmsNormRows(x, D, n, D, w.norm2, normed, D);
  precision_.RoundOperand(normed, D, n, D);
  cpu::Linear(normed, D, n, D, w.mlp_gate, F, s->gate.data(), F, 0.0f, ops);
  cpu::Linear(normed, D, n, D, w.mlp_up, F, s->up.data(), F, 0.0f, ops);
}

void CpuMlpOps::Down(const LayerWeights& w, float* x, int64_t n, Slice* s) {
  const int64_t D = c_.d_model, F = c_.mlp_hidden;
  float* gate = s->gate.data();
  const float* up = s->up.data();
  const cpu::Operands& ops = precision_.operands();
  if (precision_.makes_bf16()) {
    // The hidden rows made as bf16 (the down projection's operand), not
    // written as float32 for the matmul to read and round.
    GrowTo(&s->hidden16, n * F);
    uint16_t* hidden = s->hidden16.data();
    cpu::ParallelForEachVector(n * F, [&](int64_t i, auto like) {
      cpu::Put(cpu::SiluOf(cpu::LoadLike(like, gate + i)) * cpu::LoadLike(like, up + i),
               hidden + i);
    });
    if (ops.packed()->LinearBf16(hidden, n, F, w.mlp_down, D, x, D, 1.0f)) return;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * F; ++i) {  // declined: the same values as float32, exactly
      gate[i] = std::bit_cast<float>(static_cast<uint32_t>(hidden[i]) << 16);
    }
  } else {
    cpu::ParallelForEachVector(n * F, [&](int64_t i, auto like) {
      cpu::Put(cpu::SiluOf(cpu::LoadLike(like, gate + i)) * cpu::LoadLike(like, up + i), gate + i);
    });
    precision_.RoundOperand(gate, F, n, F);
  }
  cpu::Linear(gate, F, n, F, w.mlp_down, D, x, D, 1.0f, ops);
}

}  // namespace lact
