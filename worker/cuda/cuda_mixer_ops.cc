#include "worker/cuda/cuda_mixer_ops.h"

#include <type_traits>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/ssd_scan_bf16.h"

namespace lact {

absl::Status CudaMixerOps::Allocate(int64_t tile, cuda::SsdMath scan_math) {
  ssd_ = cuda::SsdWorkspace(0, scan_math);
  bf16_scan_ = scan_math == cuda::SsdMath::kBf16;
  const int64_t T = tile, di = c_.d_inner(), C = c_.conv_channels(), hs = c_.ssm_heads();
  const int64_t history = int64_t{c_.ssm.conv_width - 1} * C;
  const int64_t fp32_tile = bf16_scan_ ? 0 : T;
  LACT_RETURN_IF_ERROR(proj_.Allocate(ctx_.precision(), T * c_.in_proj_rows()));
  LACT_RETURN_IF_ERROR(AllocateFloats({{&xbc_, fp32_tile * C},
                                       {&dt_, T * hs},
                                       {&y_, fp32_tile * di},
                                       {&ssm_, hs * c_.ssm.head_dim * c_.ssm.d_state},
                                       {&conv_, history},
                                       {&conv_scratch_, history},
                                       {&log_decay_, hs}}));
  return AllocateBf16(ctx_.precision(), {{&y16_, T * di}, {&xbc16_, (T - fp32_tile) * C}});
}

absl::Status CudaMixerOps::LoadScanState(const MambaState& s) {
  LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ssm_.get(), s.ssm.ptr(), s.ssm.size() * sizeof(float),
                                            cudaMemcpyHostToDevice, stream()));
  if (s.conv.size() > 0) {
    LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(conv_.get(), s.conv.ptr(),
                                              s.conv.size() * sizeof(float), cudaMemcpyHostToDevice,
                                              stream()));
  }
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(log_decay_.get(), 0, log_decay_.size() * sizeof(float), stream()));
  return ctx_.Synchronize();  // the host copies may go out of scope
}

absl::Status CudaMixerOps::StoreScanState(MambaState* s, float* log_decay) {
  LACT_RETURN_IF_ERROR(ctx_.Download(ssm_.get(), s->ssm.size(), s->ssm.ptr()));
  LACT_RETURN_IF_ERROR(ctx_.Download(conv_.get(), s->conv.size(), s->conv.ptr()));
  if (log_decay == nullptr) return absl::OkStatus();
  return ctx_.Download(log_decay_.get(), c_.ssm_heads(), log_decay);
}

absl::Status CudaMixerOps::Tile(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                                bool outputs, bool summarize) {
  const MambaDirWeights& m = w.mamba[dir];
  const int64_t D = c_.d_model, di = c_.d_inner(), C = c_.conv_channels(), R = c_.in_proj_rows();
  const int hs = c_.ssm_heads();
  // The state-only pass needs no gate z: project the conv and dt rows only.
  const int64_t skip = outputs ? 0 : di;
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx_, rows_.NormedRows(first), D, n, D,
                                    weights_.Matrix(m.in_proj).Offset(skip * D), R - skip,
                                    proj_.at(skip), R));
  LACT_RETURN_IF_ERROR(cuda::SoftplusBias(stream(), proj_.at(di + C), R, n, hs, weights_(m.dt_bias),
                                          0.0f, dt_.get(), hs));
  return Scan(w, dir, first, n, outputs, summarize);
}

absl::Status CudaMixerOps::Scan(const LayerWeights& w, Direction dir, int64_t first, int64_t n,
                                bool outputs, bool summarize) {
  const MambaDirWeights& m = w.mamba[dir];
  const int64_t di = c_.d_inner(), C = c_.conv_channels(), R = c_.in_proj_rows();
  const int hs = c_.ssm_heads();
  // Row i of the scan order: row i (forward) or n - 1 - i (backward).
  const int64_t last = dir == kForward ? 0 : n - 1, step = dir == kForward ? 1 : -1;
  const cuda::Values xbc = bf16_scan_ ? cuda::Values(Bf16(xbc16_)) : cuda::Values(xbc_.get());
  const cuda::Values y = bf16_scan_ ? cuda::Values(Bf16(y16_)) : cuda::Values(y_.get());
  LACT_RETURN_IF_ERROR(cuda::ConvSilu(
      stream(), proj_.at(last * R + di), step * R, n, C, c_.ssm.conv_width, weights_(m.conv_w),
      weights_(m.conv_b), conv_.get(), conv_scratch_.get(), xbc.Offset(last * C), step * C));
  const float* const dt = dt_.get() + last * hs;
  float* const log_decay = summarize ? log_decay_.get() : nullptr;
  // The scan's parameters in the element type of its rows: float or bf16.
  auto params = [&](auto* xbc_rows, auto* y_rows) {
    using T = std::remove_pointer_t<decltype(y_rows)>;
    using Params =
        std::conditional_t<std::is_same_v<T, float>, cuda::SsdScanParams, cuda::SsdScanBf16Params>;
    const cuda::MixerRows<T> rows{
        xbc_rows + last * C, C, dt, hs, outputs ? y_rows + last * di : nullptr, di, step};
    return cuda::MixerScan<Params>(n, hs, c_.ssm.head_dim, c_.ssm.d_state, rows, weights_(m.a_log),
                                   weights_(m.d_skip));
  };
  if (bf16_scan_) {
    LACT_RETURN_IF_ERROR(
        cuda::SsdScanBf16(stream(), ssd_, params(xbc.bf16, y.bf16), ssm_.get(), log_decay));
  } else {
    LACT_RETURN_IF_ERROR(
        cuda::SsdScan(stream(), ssd_, params(xbc.f32, y.f32), ssm_.get(), log_decay));
  }
  if (!outputs) return absl::OkStatus();
  return NormAndProject(w, dir, first, n, y);
}

bool CudaMixerOps::HoldsFirstDirection() const {
  return ctx_.precision() == cuda::Precision::kBf16 && c_.d_inner() <= 2 * c_.d_model;
}

absl::Status CudaMixerOps::NormAndProject(const LayerWeights& w, Direction dir, int64_t first,
                                          int64_t n, cuda::Values y) {
  const int64_t D = c_.d_model, di = c_.d_inner(), R = c_.in_proj_rows();
  const float* norm = weights_(w.mamba[dir].norm);
  float* const acc = rows_.acc.get() + first * D;
  const cuda::GemmInput normed =
      y16_.get() != nullptr ? cuda::GemmInput(nullptr, Bf16(y16_)) : cuda::GemmInput(y.f32);
  if (!HoldsFirstDirection()) {  // each direction's out_proj added into acc
    LACT_RETURN_IF_ERROR(
        cuda::GatedRmsNormRows(stream(), y, di, proj_.at(), R, n, di, norm, {Bf16(y16_), di}));
    return cuda::Linear(ctx_, normed, di, n, di, weights_.Matrix(w.out_proj), D, acc, D, 1.0f);
  }
  // The first direction's rows wait, bf16, in acc's memory (a row's 2 D
  // bf16 slots); the second's are added to them and projected once.
  __nv_bfloat16* const held = reinterpret_cast<__nv_bfloat16*>(acc);
  if (!holding_.has_value() || *holding_ == dir) {
    holding_ = dir;
    return cuda::GatedRmsNormRows(stream(), y, di, proj_.at(), R, n, di, norm, {held, 2 * D});
  }
  LACT_RETURN_IF_ERROR(cuda::GatedRmsNormRows(stream(), y, di, proj_.at(), R, n, di, norm,
                                              {Bf16(y16_), di, held, 2 * D}));
  return cuda::Linear(ctx_, normed, di, n, di, weights_.Matrix(w.out_proj), D, acc, D, 0.0f);
}

}  // namespace lact
