// The CPU ops' precision policy and the activations their parts share.
//
// CpuPrecision says, once, how the GEMMs take their operands: float32, or
// rounded to bf16 (cpu::Operands::kBf16, the reference's bf16_operands),
// and in that mode whether the activations only GEMMs read are made as
// bf16 where they are made (on the bf16 matmul, cpu::Bf16MatmulOn()) or
// rounded in float32 (the emulation). It owns what the operands carry to
// the GEMMs: the model's weights packed for oneDNN's matmul (unless the
// caller keeps them) and bf16 copies of the rounded fast weights.
//
// CpuActivations holds the rows of the shard that the mixer, LaCT and MLP
// parts share, [L, D] each: the residual stream x and acc, where the
// block's mixer and LaCT outputs add up. The block's normed input h is
// never held whole: each part makes the rows of its tile from x as it
// reads them (float32, or bf16 only where activations are made as bf16),
// the same values a whole h would hold, without the memory or its pass.
#ifndef LACT_WORKER_CPU_CPU_PRECISION_H_
#define LACT_WORKER_CPU_CPU_PRECISION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/tensor.h"
#include "kernels/cpu/bf16_copies.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_weights.h"

namespace lact {

class CpuPrecision {
 public:
  // `packed`: the model's weights packed by the caller (kept across its
  // sequences), or null: this policy packs its own on first use.
  CpuPrecision(cpu::Operands operands, cpu::PackedWeights* packed);
  CpuPrecision(const CpuPrecision&) = delete;  // the operands point into it
  CpuPrecision& operator=(const CpuPrecision&) = delete;

  // What every GEMM of the ops is given.
  const cpu::Operands& operands() const { return operands_; }
  // GEMM operands are rounded to bf16.
  bool rounds() const { return operands_.bf16(); }
  // Activations only GEMMs read are made as bf16 (implies rounds()).
  bool makes_bf16() const { return makes_bf16_; }
  // Rows [0, n) of a float32 GEMM operand made ready for its GEMMs: in the
  // bf16 mode rounded (or left for the bf16 matmul to round as it packs
  // them, cpu::RoundForBf16Gemm); untouched in float32.
  void RoundOperand(float* x, int64_t ld, int64_t n, int64_t cols) const;
  // Where the bf16 matmul finds the rounded fast weights as bf16.
  cpu::Bf16Copies& bf16_copies() { return bf16_copies_; }

 private:
  cpu::PackedWeights own_packed_;
  cpu::Bf16Copies bf16_copies_;
  const cpu::Operands operands_;
  const bool makes_bf16_;
};

// Grows `v` to at least `size` elements.
template <typename T>
void GrowTo(std::vector<T>* v, int64_t size) {
  if (static_cast<int64_t>(v->size()) < size) v->resize(size);
}

// Where a tile's rows of h are made: one per thread that makes them.
struct NormedScratch {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

struct CpuActivations {
  Tensor x;
  // Shared: the last block makes the output rows in it (CpuOps::OutputBuffer).
  std::shared_ptr<Tensor> acc;
  const float* norm1 = nullptr;  // the block's (BeginBlock): h = rmsnorm(x, norm1)

  // Calls `f` with h's rows [first, first + n) as the GEMMs read them, made
  // from x into `scratch`: a const float* (rounded as `p` says) or a const
  // uint16_t* (bf16, where `p` makes activations as bf16).
  template <typename F>
  void WithNormed(const CpuPrecision& p, int64_t first, int64_t n, NormedScratch* scratch,
                  F&& f) const {
    const int64_t D = x.dim(1);
    const float* rows = x.ptr() + first * D;
    if (p.makes_bf16()) {
      GrowTo(&scratch->bf16, n * D);
      cpu::RmsNormRowsToBf16(rows, D, n, D, norm1, scratch->bf16.data());
      f(static_cast<const uint16_t*>(scratch->bf16.data()));
      return;
    }
    GrowTo(&scratch->f32, n * D);
    cpu::RmsNormRows(rows, D, n, D, norm1, scratch->f32.data(), D);
    p.RoundOperand(scratch->f32.data(), D, n, D);  // h is read by GEMMs only
    f(static_cast<const float*>(scratch->f32.data()));
  }
};

}  // namespace lact

#endif  // LACT_WORKER_CPU_CPU_PRECISION_H_
