#include "worker/cpu/cpu_precision.h"

#include "kernels/cpu/bf16_matmul.h"

namespace lact {

CpuPrecision::CpuPrecision(cpu::Operands operands, cpu::PackedWeights* packed)
    : operands_(operands.With(&bf16_copies_, packed != nullptr ? packed : &own_packed_)),
      makes_bf16_(operands.bf16() && cpu::Bf16MatmulOn()) {}

void CpuPrecision::RoundOperand(float* x, int64_t ld, int64_t n, int64_t cols) const {
  if (rounds()) cpu::RoundForBf16Gemm(x, ld, n, cols);
}

}  // namespace lact
