#include "worker/cuda_runner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/newton_schulz.h"
#include "kernels/cuda/ops.h"

namespace lact {

using cuda::DeviceBuffer;

// Device buffers for one sequence of L tokens.
struct CudaRunner::Buffers {
  int64_t L = 0;
  DeviceBuffer x, h, acc, hrev, proj, xbc, dt, y, a, kv, lr, q, o, g, u, dh, gate, up, scratch, out;
  DeviceBuffer ssm[2], conv[2];
  DeviceBuffer w0, w1, w2, dw0, dw1, dw2;

  absl::Status Allocate(const ModelConfig& c, int64_t tokens) {
    L = tokens;
    const int64_t D = c.d_model, di = c.d_inner(), C = c.conv_channels(), R = c.in_proj_rows(), hs = c.ssm_heads();
    const int64_t dhh = c.fast_hidden(), F = c.mlp_hidden, ht = c.ttt_heads();
    const int64_t fast = ht * dhh * c.ttt.head_dim, state = hs * c.ssm.head_dim * c.ssm.d_state;
    const int64_t hist = (c.ssm.conv_width - 1) * C;
    struct {
      DeviceBuffer* buffer;
      int64_t floats;
    } plan[] = {{&x, L * D},     {&h, L * D},       {&acc, L * D},     {&hrev, L * D},   {&proj, L * R},
                {&xbc, L * C},   {&dt, L * hs},     {&y, L * di},      {&a, L * D},      {&kv, L * 2 * D},
                {&lr, L * 3 * ht}, {&q, L * D},     {&o, L * D},       {&g, L * dhh},    {&u, L * dhh},
                {&dh, L * dhh},  {&gate, L * F},    {&up, L * F},      {&scratch, hist + 1},
                {&ssm[0], state}, {&ssm[1], state}, {&conv[0], hist + 1}, {&conv[1], hist + 1},
                {&w0, fast},     {&w1, fast},       {&w2, fast},       {&dw0, fast},     {&dw1, fast},
                {&dw2, fast},    {&out, L * c.output_width()}};
    for (auto& p : plan) {
      LACT_ASSIGN_OR_RETURN(*p.buffer, DeviceBuffer::Allocate(static_cast<size_t>(p.floats)));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(const Model& model, const ModelConfig& config,
                                                               int device) {
  auto runner = std::unique_ptr<CudaRunner>(new CudaRunner(model, config));
  LACT_ASSIGN_OR_RETURN(runner->ctx_, cuda::CudaContext::Create(device));
  LACT_RETURN_IF_ERROR(runner->UploadWeights());
  return runner;
}

absl::Status CudaRunner::UploadWeights() {
  for (const auto& [name, t] : model_.tensors()) {
    LACT_ASSIGN_OR_RETURN(DeviceBuffer b, ctx_->Upload(t.ptr(), t.size()));
    device_of_[t.ptr()] = b.get();
    weights_[t.ptr()] = std::move(b);
  }
  return ctx_->Synchronize();
}

absl::StatusOr<Tensor> CudaRunner::RunContext(const Tensor& context, FusedState* state) {
  *state = ZeroFusedState(config_);
  return Run(context, /*is_context=*/true, state);
}

absl::StatusOr<Tensor> CudaRunner::RunQuery(const Tensor& query, const FusedState& state) {
  FusedState copy = state;
  return Run(query, /*is_context=*/false, &copy);
}

absl::StatusOr<Tensor> CudaRunner::Run(const Tensor& tokens, bool is_context, FusedState* state) {
  const ModelConfig& c = config_;
  if (tokens.rank() != 2 || tokens.dim(1) != c.input_width() || tokens.dim(0) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tokens have shape ", ShapeString(tokens.shape),
                                                   "; the model takes [L >= 1, ", c.input_width(), "]"));
  }
  const int64_t L = tokens.dim(0), D = c.d_model;
  LACT_RETURN_IF_ERROR(ctx_->Activate());  // the device is per thread in CUDA
  Buffers b;
  LACT_RETURN_IF_ERROR(b.Allocate(c, L));
  LACT_ASSIGN_OR_RETURN(DeviceBuffer input, ctx_->Upload(tokens.ptr(), tokens.size()));
  cudaStream_t s = ctx_->stream();
  if (model_.embed() != nullptr) {
    LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, input.get(), c.d_input, L, c.d_input, Device(model_.embed()), D,
                                      b.x.get(), D));
  } else {
    LACT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(b.x.get(), input.get(), L * D * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  for (int i = 0; i < c.n_layers; ++i) {
    LACT_RETURN_IF_ERROR(cuda::RmsNormRows(s, b.x.get(), D, L, D, Device(model_.layer(i).norm1), b.h.get(), D));
    LACT_RETURN_IF_ERROR(BiMamba(i, is_context, b, &state->layers[i]));
    LACT_RETURN_IF_ERROR(Lact(i, is_context, b, &state->layers[i]));
    LACT_RETURN_IF_ERROR(Mlp(i, b));
  }
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(s, b.x.get(), D, L, D, Device(model_.final_norm()), b.h.get(), D));
  Tensor out({L, c.output_width()});
  if (model_.head() != nullptr) {
    LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, b.h.get(), D, L, D, Device(model_.head()), c.d_output, b.out.get(),
                                      c.d_output));
    LACT_RETURN_IF_ERROR(ctx_->Download(b.out.get(), out.size(), out.ptr()));
  } else {
    LACT_RETURN_IF_ERROR(ctx_->Download(b.h.get(), out.size(), out.ptr()));
  }
  return out;
}

absl::Status CudaRunner::BiMamba(int layer, bool is_context, Buffers& b, LayerState* state) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layer(layer);
  const int64_t L = b.L, D = c.d_model, di = c.d_inner(), C = c.conv_channels(), R = c.in_proj_rows();
  const int64_t hs = c.ssm_heads(), N = c.ssm.d_state;
  cudaStream_t s = ctx_->stream();
  for (Direction dir : {kForward, kBackward}) {
    const MambaDirWeights& m = w.mamba[dir];
    MambaState& st = state->mamba[dir];
    // Forward of a query continues from the context's state; all else from zero.
    const bool carry = !is_context && dir == kForward;
    LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.ssm[dir].get(), 0, st.ssm.size() * sizeof(float), s));
    LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.conv[dir].get(), 0, b.conv[dir].size() * sizeof(float), s));
    if (carry) {
      LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.ssm[dir].get(), st.ssm.ptr(), st.ssm.size() * sizeof(float),
                                                cudaMemcpyHostToDevice, s));
      LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.conv[dir].get(), st.conv.ptr(), st.conv.size() * sizeof(float),
                                                cudaMemcpyHostToDevice, s));
    }
    const float* hd = b.h.get();
    if (dir == kBackward) {
      LACT_RETURN_IF_ERROR(cuda::ReverseRows(s, b.h.get(), b.hrev.get(), L, D));
      hd = b.hrev.get();
    }
    LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, hd, D, L, D, Device(m.in_proj), R, b.proj.get(), R));
    LACT_RETURN_IF_ERROR(cuda::ConvSilu(s, b.proj.get() + di, R, L, C, c.ssm.conv_width, Device(m.conv_w),
                                        Device(m.conv_b), b.conv[dir].get(), b.scratch.get(), b.xbc.get(), C));
    LACT_RETURN_IF_ERROR(
        cuda::SoftplusBias(s, b.proj.get() + di + C, R, L, hs, Device(m.dt_bias), 0.0f, b.dt.get(), hs));
    const float* xbc = b.xbc.get();
    LACT_RETURN_IF_ERROR(cuda::ScanRecurrence(s, L, static_cast<int>(hs), c.ssm.head_dim, c.ssm.d_state, xbc, C,
                                              xbc + di, C, xbc + di + N, C, b.dt.get(), hs, Device(m.a_log),
                                              Device(m.d_skip), b.y.get(), di, b.ssm[dir].get()));
    LACT_RETURN_IF_ERROR(cuda::GatedRmsNormRows(s, b.y.get(), di, b.proj.get(), R, L, di, Device(m.norm)));
    if (dir == kForward) {
      LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, b.y.get(), di, L, di, Device(w.out_proj), D, b.acc.get(), D));
    } else {
      LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, b.y.get(), di, L, di, Device(w.out_proj), D, b.a.get(), D));
      LACT_RETURN_IF_ERROR(cuda::AddReversedRows(s, b.acc.get(), b.a.get(), L, D));
    }
    if (is_context) {
      LACT_RETURN_IF_ERROR(ctx_->Download(b.ssm[dir].get(), st.ssm.size(), st.ssm.ptr()));
      LACT_RETURN_IF_ERROR(ctx_->Download(b.conv[dir].get(), st.conv.size(), st.conv.ptr()));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::Lact(int layer, bool is_context, Buffers& b, LayerState* state) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layer(layer);
  const int64_t L = b.L, D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden();
  const int64_t mat = dh * dhh, fast = ht * mat;
  cudaStream_t s = ctx_->stream();
  const cuda::CudaContext& ctx = *ctx_;
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx, b.h.get(), D, L, D, Device(w.qkv) + D * D, 2 * D, b.kv.get(), 2 * D));
  LACT_RETURN_IF_ERROR(cuda::SiluRows(s, b.kv.get(), 2 * D, L, 2 * D));
  LACT_RETURN_IF_ERROR(cuda::L2NormGroups(s, b.kv.get(), 2 * D, L, ht, dh));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx, b.h.get(), D, L, D, Device(w.lr_w), 3 * ht, b.lr.get(), 3 * ht));
  const float shift = static_cast<float>(c.ttt.base_lr + std::log(-std::expm1(-c.ttt.base_lr)));
  LACT_RETURN_IF_ERROR(cuda::SoftplusBias(s, b.lr.get(), 3 * ht, L, 3 * ht, Device(w.lr_b), shift, b.lr.get(), 3 * ht));
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx, b.h.get(), D, L, D, Device(w.qkv), D, b.q.get(), D));
  LACT_RETURN_IF_ERROR(cuda::SiluRows(s, b.q.get(), D, L, D));
  LACT_RETURN_IF_ERROR(cuda::L2NormGroups(s, b.q.get(), D, L, ht, dh));

  // Fast weights: the model's for a context, the retained ones for a query.
  float* fw[3] = {b.w0.get(), b.w1.get(), b.w2.get()};
  const float* init[3] = {Device(w.w0), Device(w.w1), Device(w.w2)};
  const Tensor* retained[3] = {&state->w0, &state->w1, &state->w2};
  for (int k = 0; k < 3; ++k) {
    if (is_context) {
      LACT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(fw[k], init[k], fast * sizeof(float), cudaMemcpyDeviceToDevice, s));
    } else {
      LACT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(fw[k], retained[k]->ptr(), fast * sizeof(float), cudaMemcpyHostToDevice, s));
    }
  }
  const int64_t chunk = is_context && c.ttt.chunk_tokens > 0 ? c.ttt.chunk_tokens : L;
  for (int64_t c0 = 0; c0 < L; c0 += chunk) {
    const int64_t n = std::min(chunk, L - c0);
    for (int64_t head = 0; head < ht && is_context; ++head) {
      const float* k = b.kv.get() + c0 * 2 * D + head * dh;
      const float* v = k + D;
      float *w0 = fw[0] + head * mat, *w1 = fw[1] + head * mat, *w2 = fw[2] + head * mat;
      float *d0 = b.dw0.get() + head * mat, *d1 = b.dw1.get() + head * mat, *d2 = b.dw2.get() + head * mat;
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, false, true, n, dhh, dh, 1.0f, k, 2 * D, w0, dh, 0.0f, b.g.get(), dhh));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, false, true, n, dhh, dh, 1.0f, k, 2 * D, w2, dh, 0.0f, b.u.get(), dhh));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, false, false, n, dhh, dh, 1.0f, v, 2 * D, w1, dhh, 0.0f, b.dh.get(), dhh));
      LACT_RETURN_IF_ERROR(cuda::LactGradFactors(s, b.g.get(), b.u.get(), b.dh.get(), n, dhh,
                                                 b.lr.get() + c0 * 3 * ht + 3 * head, 3 * ht));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, true, false, dh, dhh, n, 1.0f, v, 2 * D, b.u.get(), dhh, 0.0f, d1, dhh));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, true, false, dhh, dh, n, 1.0f, b.g.get(), dhh, k, 2 * D, 0.0f, d0, dh));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, true, false, dhh, dh, n, 1.0f, b.dh.get(), dhh, k, 2 * D, 0.0f, d2, dh));
    }
    if (is_context) {
      float* dws[3] = {b.dw0.get(), b.dw1.get(), b.dw2.get()};
      if (c.ttt.muon_steps > 0) {
        for (int m = 0; m < 3; ++m) {
          const int64_t rows = m == 1 ? dh : dhh, cols = m == 1 ? dhh : dh;
          LACT_RETURN_IF_ERROR(cuda::NewtonSchulz(ctx, dws[m], ht, rows, cols, c.ttt.muon_steps));
        }
      }
      for (int m = 0; m < 3; ++m) {
        const int64_t rows = m == 1 ? dh : dhh, cols = m == 1 ? dhh : dh;
        LACT_RETURN_IF_ERROR(cuda::WeightNormUpdate(s, fw[m], dws[m], init[m], ht * rows, cols));
      }
    }
    for (int64_t head = 0; head < ht; ++head) {
      const float* qh = b.q.get() + c0 * D + head * dh;
      LACT_RETURN_IF_ERROR(
          cuda::Gemm(ctx, false, true, n, dhh, dh, 1.0f, qh, D, fw[0] + head * mat, dh, 0.0f, b.g.get(), dhh));
      LACT_RETURN_IF_ERROR(
          cuda::Gemm(ctx, false, true, n, dhh, dh, 1.0f, qh, D, fw[2] + head * mat, dh, 0.0f, b.u.get(), dhh));
      LACT_RETURN_IF_ERROR(cuda::SiluMul(s, b.g.get(), b.u.get(), n * dhh));
      LACT_RETURN_IF_ERROR(cuda::Gemm(ctx, false, true, n, dh, dhh, 1.0f, b.g.get(), dhh, fw[1] + head * mat, dhh,
                                      0.0f, b.o.get() + c0 * D + head * dh, D));
    }
  }
  for (int64_t head = 0; head < ht; ++head) {
    float* oh = b.o.get() + head * dh;
    LACT_RETURN_IF_ERROR(cuda::RmsNormRows(s, oh, D, L, dh, Device(w.o_norm), oh, D));
  }
  LACT_RETURN_IF_ERROR(cuda::Linear(ctx, b.o.get(), D, L, D, Device(w.o_proj), D, b.acc.get(), D, 1.0f));
  if (is_context) {
    LACT_RETURN_IF_ERROR(ctx_->Download(fw[0], fast, state->w0.ptr()));
    LACT_RETURN_IF_ERROR(ctx_->Download(fw[1], fast, state->w1.ptr()));
    LACT_RETURN_IF_ERROR(ctx_->Download(fw[2], fast, state->w2.ptr()));
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::Mlp(int layer, Buffers& b) {
  const ModelConfig& c = config_;
  const LayerWeights& w = model_.layer(layer);
  const int64_t L = b.L, D = c.d_model, F = c.mlp_hidden;
  cudaStream_t s = ctx_->stream();
  LACT_RETURN_IF_ERROR(cuda::AddInPlace(s, b.x.get(), b.acc.get(), L * D));
  LACT_RETURN_IF_ERROR(cuda::RmsNormRows(s, b.x.get(), D, L, D, Device(w.norm2), b.h.get(), D));
  LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, b.h.get(), D, L, D, Device(w.mlp_gate), F, b.gate.get(), F));
  LACT_RETURN_IF_ERROR(cuda::Linear(*ctx_, b.h.get(), D, L, D, Device(w.mlp_up), F, b.up.get(), F));
  LACT_RETURN_IF_ERROR(cuda::SiluMul(s, b.gate.get(), b.up.get(), L * F));
  return cuda::Linear(*ctx_, b.gate.get(), F, L, F, Device(w.mlp_down), D, b.x.get(), D, 1.0f);
}

}  // namespace lact
