#include "worker/cpu/cpu_ops.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "common/half.h"
#include "common/huge_pages.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threading.h"

namespace lact {

CpuOps::CpuOps(const Model& model, const ModelConfig& c, int64_t tokens, int64_t tile,
               Collective* grads, OverlapStats* stats, cpu::Operands operands,
               cpu::PackedWeights* packed)
    : BackendOps(tokens, tile),
      model_(model),
      c_(c),
      precision_(operands, packed),
      mixer_(c, precision_, rows_, tokens, tile),
      lact_(c, precision_, rows_, grads, stats),
      mlp_(c, precision_, rows_) {}

absl::Status CpuOps::LoadTokens(Tensor tokens) {
  const int64_t L = tokens.dim(0), D = c_.d_model;
  if (model_.embed() != nullptr) {
    precision_.RoundOperand(tokens.ptr(), c_.d_input, L, c_.d_input);
    rows_.x = HugePageTensor({L, D}, cpu::FaultInPages);
    cpu::Linear(tokens.ptr(), c_.d_input, L, c_.d_input, model_.embed(), D, rows_.x.ptr(), D, 0.0f,
                precision_.operands());
  } else {
    rows_.x = std::move(tokens);
  }
  rows_.acc = std::make_shared<Tensor>(HugePageTensor({L, D}, cpu::FaultInPages));
  return absl::OkStatus();
}

absl::Status CpuOps::OutputRows(int64_t first, int64_t n, float* out) {
  const int64_t D = c_.d_model;
  const float* x = rows_.x.ptr() + first * D;
  if (model_.head() == nullptr) {
    cpu::RmsNormRows(x, D, n, D, model_.final_norm(), out, D);
    return absl::OkStatus();
  }
  GrowTo(&final_normed_, n * D);
  float* normed = final_normed_.data();
  cpu::RmsNormRows(x, D, n, D, model_.final_norm(), normed, D);
  precision_.RoundOperand(normed, D, n, D);
  cpu::Linear(normed, D, n, D, model_.head(), c_.d_output, out, c_.d_output, 0.0f,
              precision_.operands());
  return absl::OkStatus();
}

// acc's rows of a tile are free once its ResidualMlp has read them.
std::shared_ptr<Tensor> CpuOps::OutputBuffer(int64_t width) {
  return width == c_.d_model ? rows_.acc : nullptr;
}

absl::Status CpuOps::ReadRows(Activation a, int64_t first, int64_t n, float* out) {
  const int64_t D = c_.d_model;
  if (a == Activation::kNormed) {
    NormedScratch scratch;
    rows_.WithNormed(precision_, first, n, &scratch, [&](const auto* h) {
      for (int64_t i = 0; i < n * D; ++i) {
        if constexpr (std::is_same_v<decltype(h), const uint16_t*>) {
          out[i] = BFloat16ToFloat(h[i]);
        } else {
          out[i] = h[i];
        }
      }
    });
    // h as its GEMMs take it: rounded in the bf16 mode (RoundOperand may
    // have left that to the bf16 matmul).
    if (precision_.rounds()) cpu::RoundRowsToBf16(out, D, n, D);
    return absl::OkStatus();
  }
  const Tensor& rows = a == Activation::kResidual ? rows_.x : *rows_.acc;
  std::copy_n(rows.ptr() + first * D, n * D, out);
  return absl::OkStatus();
}

absl::Status CpuOps::BeginBlock(const LayerWeights& w) {
  rows_.norm1 = w.norm1;  // h's rows are made from x as each part reads them
  std::fill(rows_.acc->data.begin(), rows_.acc->data.end(), 0.0f);
  mixer_.BeginBlock();
  return absl::OkStatus();
}

}  // namespace lact
