#include "kernels/reference/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace lact::reference {
namespace {

// A row-major float64 matrix.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(r * c, 0.0) {}
  double& at(int64_t r, int64_t c) { return v[r * cols + c]; }
  double at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }
double Softplus(double x) { return x > 30.0 ? x : std::log1p(std::exp(x)); }
double InvSoftplus(double y) { return y + std::log(-std::expm1(-y)); }

Mat FromFloat(const float* p, int64_t rows, int64_t cols) {
  Mat m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.v[i] = p[i];
  return m;
}

TensorD ToTensor(const Mat& m, std::vector<int64_t> shape) {
  TensorD t(std::move(shape));
  t.data = m.v;
  return t;
}

// Set by RunJob for a job whose matrix-product operands are rounded to
// bf16 (ReferenceOptions::bf16_operands).
thread_local bool bf16_operands = false;

// v as float32 rounded to the nearest bf16 (ties to even).
double Bf16(double v) { return RoundToBFloat16(static_cast<float>(v)); }

// A product operand: the value, or its float32 value rounded to the nearest
// bf16 (ties to even), as the bf16 GPU mode feeds its GEMMs.
double Operand(double v) { return bf16_operands ? Bf16(v) : v; }

// Set by RunJob for ReferenceOptions::bf16_activations: the products the
// GPU's bf16 mode keeps as bf16 rounded as they are made.
thread_local bool bf16_activations = false;
Mat Activation(Mat m) {
  if (bf16_activations)
    for (double& v : m.v) v = Bf16(v);
  return m;
}

// Set by RunJob for ReferenceOptions::bf16_scan: the scan's inputs and
// outputs rounded to bf16.
thread_local bool bf16_scan = false;
double ScanValue(double v) { return bf16_scan ? Bf16(v) : v; }

// x @ W^T with W[out, in] given as floats.
Mat Linear(const Mat& x, const float* w, int64_t out) {
  Mat y(x.rows, out);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < x.cols; ++i) s += Operand(x.at(r, i)) * Operand(w[o * x.cols + i]);
      y.at(r, o) = s;
    }
  return y;
}

// a @ b; `exact` keeps full precision whatever the job's operand precision
// (the Newton-Schulz iteration, which the GPU runs in fp32).
Mat MatMul(const Mat& a, const Mat& b, bool exact = false) {
  Mat c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k) {
      const double aik = exact ? a.at(i, k) : Operand(a.at(i, k));
      for (int64_t j = 0; j < b.cols; ++j)
        c.at(i, j) += aik * (exact ? b.at(k, j) : Operand(b.at(k, j)));
    }
  return c;
}

Mat Transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t.at(j, i) = a.at(i, j);
  return t;
}

Mat RmsNorm(const Mat& x, const float* w) {
  Mat y(x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < x.cols; ++c) ss += x.at(r, c) * x.at(r, c);
    const double inv = 1.0 / std::sqrt(ss / x.cols + 1e-5);
    for (int64_t c = 0; c < x.cols; ++c) y.at(r, c) = x.at(r, c) * inv * w[c];
  }
  return y;
}

Mat Reverse(const Mat& x) {
  Mat y(x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < x.cols; ++c) y.at(r, c) = x.at(x.rows - 1 - r, c);
  return y;
}

Mat Columns(const Mat& x, int64_t begin, int64_t count) {
  Mat y(x.rows, count);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < count; ++c) y.at(r, c) = x.at(r, begin + c);
  return y;
}

// Mamba state of one direction: S [H_s][P*N] and the conv inputs history [W-1, C].
struct MixerState {
  std::vector<double> ssm;
  Mat conv;
};

// docs/model.md, BiMamba, one direction, tokens already in scan order.
Mat Mixer(const Mat& h, const MambaDirWeights& w, const ModelConfig& c, MixerState* st) {
  const int64_t L = h.rows, di = c.d_inner(), N = c.ssm.d_state, hs = c.ssm_heads(),
                P = c.ssm.head_dim;
  const int64_t W = c.ssm.conv_width, C = c.conv_channels();
  Mat proj = Activation(Linear(h, w.in_proj, c.in_proj_rows()));
  Mat z = Columns(proj, 0, di), xbc_in = Columns(proj, di, C), dt = Columns(proj, di + C, hs);
  // Conv over [history; inputs].
  Mat u(W - 1 + L, C);
  for (int64_t r = 0; r < W - 1; ++r)
    for (int64_t ch = 0; ch < C; ++ch) u.at(r, ch) = st->conv.at(r, ch);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t ch = 0; ch < C; ++ch) u.at(W - 1 + t, ch) = xbc_in.at(t, ch);
  Mat xbc(L, C);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t ch = 0; ch < C; ++ch) {
      double s = w.conv_b[ch];
      for (int64_t j = 0; j < W; ++j) s += w.conv_w[ch * W + j] * u.at(t + j, ch);
      xbc.at(t, ch) = ScanValue(Silu(s));
    }
  for (int64_t r = 0; r < W - 1; ++r)
    for (int64_t ch = 0; ch < C; ++ch) st->conv.at(r, ch) = u.at(L + r, ch);
  Mat y(L, di);
  for (int64_t head = 0; head < hs; ++head) {
    const double a = -std::exp(static_cast<double>(w.a_log[head]));
    double* s = &st->ssm[head * P * N];
    for (int64_t t = 0; t < L; ++t) {
      const double d = Softplus(dt.at(t, head) + w.dt_bias[head]);
      const double decay = std::exp(d * a);
      for (int64_t p = 0; p < P; ++p) {
        const double xv = xbc.at(t, head * P + p);
        double out = 0;
        for (int64_t n = 0; n < N; ++n) {
          double& sv = s[p * N + n];
          sv = decay * sv + d * xv * xbc.at(t, di + n);
          out += sv * xbc.at(t, di + N + n);
        }
        y.at(t, head * P + p) = ScanValue(out + w.d_skip[head] * xv);
      }
    }
  }
  for (int64_t t = 0; t < L; ++t)
    for (int64_t ch = 0; ch < di; ++ch) y.at(t, ch) *= Silu(z.at(t, ch));
  return RmsNorm(y, w.norm);
}

// Fast weights of one head.
struct FastWeights {
  Mat w0, w1, w2;  // [d_h, dh], [dh, d_h], [d_h, dh]
};

// Rounds every element to bf16 when `bf16`, as torch's bf16 tensors do
// after each operation (upstream LaCT's iteration; ttt.ns_precision).
Mat Rounded(Mat m, bool bf16) {
  if (bf16)
    for (double& v : m.v) v = Bf16(v);
  return m;
}

Mat NewtonSchulz(const Mat& g, int steps, bool bf16) {
  Mat x = Rounded(g, bf16);
  double norm = 0;
  for (double v : x.v) norm += v * v;
  norm = std::sqrt(norm);
  const double denom = bf16 ? Bf16(Bf16(norm) + 1e-7) : norm + 1e-7;
  for (double& v : x.v) v = bf16 ? Bf16(v / denom) : v / denom;
  const bool transposed = x.rows > x.cols;
  if (transposed) x = Transpose(x);
  for (int i = 0; i < steps; ++i) {
    Mat a = Rounded(MatMul(x, Transpose(x), /*exact=*/true), bf16);
    Mat ca = a;
    for (double& v : ca.v) v = bf16 ? Bf16(2.0315 * v) : 2.0315 * v;
    Mat caa = Rounded(MatMul(ca, a, /*exact=*/true), bf16);
    Mat b(a.rows, a.cols);
    for (int64_t k = 0; k < (int64_t)b.v.size(); ++k) {
      b.v[k] = bf16 ? Bf16(Bf16(-4.7750 * a.v[k]) + caa.v[k]) : -4.7750 * a.v[k] + caa.v[k];
    }
    Mat bx = Rounded(MatMul(b, x, /*exact=*/true), bf16);
    for (int64_t k = 0; k < (int64_t)x.v.size(); ++k) {
      x.v[k] = bf16 ? Bf16(Bf16(3.4445 * x.v[k]) + bx.v[k]) : 3.4445 * x.v[k] + bx.v[k];
    }
  }
  return transposed ? Transpose(x) : x;
}

void UpdateWeight(Mat* w, Mat dw, const Mat& w_init, const TttConfig& t) {
  if (t.muon_steps > 0 || t.normalize_update) dw = NewtonSchulz(dw, t.muon_steps, t.ns_bf16);
  for (int64_t r = 0; r < w->rows; ++r) {
    double n = 0, n0 = 0;
    for (int64_t c = 0; c < w->cols; ++c) {
      w->at(r, c) += dw.at(r, c);
      n += w->at(r, c) * w->at(r, c);
      n0 += w_init.at(r, c) * w_init.at(r, c);
    }
    const double scale = std::sqrt(n0) / (std::sqrt(n) + 1e-5);
    for (int64_t c = 0; c < w->cols; ++c) w->at(r, c) *= scale;
  }
}

// f_w(q) for rows of q: w1 @ (silu(w0 q) * (w2 q)).
Mat ApplyFast(const FastWeights& f, const Mat& q) {
  Mat g = Activation(MatMul(q, Transpose(f.w0))), u = Activation(MatMul(q, Transpose(f.w2)));
  for (int64_t i = 0; i < (int64_t)g.v.size(); ++i) g.v[i] = Silu(g.v[i]) * u.v[i];
  return Activation(MatMul(g, Transpose(f.w1)));
}

// One chunk's update of one head's fast weights (docs/model.md, LaCT).
void UpdateFast(FastWeights* f, const FastWeights& init, const Mat& k, const Mat& v, const Mat& lr,
                const TttConfig& t) {
  const int64_t n = k.rows;
  Mat g = Activation(MatMul(k, Transpose(f->w0))), u = Activation(MatMul(k, Transpose(f->w2))),
      dh = Activation(MatMul(v, f->w1));
  Mat hd(n, g.cols), du(n, g.cols), dg(n, g.cols);
  for (int64_t i = 0; i < (int64_t)g.v.size(); ++i) {
    const double sg = Sigmoid(g.v[i]);
    hd.v[i] = g.v[i] * sg * u.v[i];
    du.v[i] = dh.v[i] * g.v[i] * sg;
    dg.v[i] = dh.v[i] * u.v[i] * sg * (1.0 + g.v[i] * (1.0 - sg));
  }
  // The token's learning rates scale the hidden-side factor of each outer
  // product (equal to scaling K; it is where the backends round a bf16 operand).
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < hd.cols; ++c) {
      dg.at(t, c) *= lr.at(t, 0);
      hd.at(t, c) *= lr.at(t, 1);
      du.at(t, c) *= lr.at(t, 2);
    }
  }
  Mat dw1 = MatMul(Transpose(v), hd), dw0 = MatMul(Transpose(dg), k),
      dw2 = MatMul(Transpose(du), k);
  UpdateWeight(&f->w0, dw0, init.w0, t);
  UpdateWeight(&f->w1, dw1, init.w1, t);
  UpdateWeight(&f->w2, dw2, init.w2, t);
}

// docs/model.md, LaCT for all heads. Context: updates `fast` chunk by chunk;
// query (is_context false): applies `fast` as it is.
Mat Lact(const Mat& h, const LayerWeights& w, const ModelConfig& c, bool is_context,
         std::vector<FastWeights>* fast, const std::vector<FastWeights>& init) {
  const int64_t L = h.rows, D = c.d_model, ht = c.ttt_heads(), dh = c.ttt.head_dim;
  Mat qkv = Activation(Linear(h, w.qkv, 3 * D));
  for (double& x : qkv.v) x = Silu(x);
  Mat lr = Linear(h, w.lr_w, 3 * ht);
  const double lr_shift = InvSoftplus(c.ttt.base_lr);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t j = 0; j < 3 * ht; ++j) lr.at(t, j) = Softplus(lr.at(t, j) + w.lr_b[j] + lr_shift);
  Mat o(L, D);
  for (int64_t head = 0; head < ht; ++head) {
    Mat q = Columns(qkv, head * dh, dh), k = Columns(qkv, D + head * dh, dh),
        v = Columns(qkv, 2 * D + head * dh, dh);
    for (Mat* m : {&q, &k}) {
      for (int64_t t = 0; t < L; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < dh; ++i) ss += m->at(t, i) * m->at(t, i);
        const double inv = 1.0 / (std::sqrt(ss) + 1e-5);
        for (int64_t i = 0; i < dh; ++i) m->at(t, i) *= inv;
      }
    }
    Mat head_lr = Columns(lr, 3 * head, 3);
    FastWeights& f = (*fast)[head];
    Mat out(L, dh);
    const int64_t chunk = is_context && c.ttt.chunk_tokens > 0 ? c.ttt.chunk_tokens : L;
    for (int64_t start = 0; start < L; start += chunk) {
      const int64_t n = std::min(chunk, L - start);
      Mat qc(n, dh), kc(n, dh), vc(n, dh), lc(n, 3);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < dh; ++i) {
          qc.at(t, i) = q.at(start + t, i);
          kc.at(t, i) = k.at(start + t, i);
          vc.at(t, i) = v.at(start + t, i);
        }
        for (int64_t j = 0; j < 3; ++j) lc.at(t, j) = head_lr.at(start + t, j);
      }
      if (is_context) UpdateFast(&f, init[head], kc, vc, lc, c.ttt);
      Mat oc = ApplyFast(f, qc);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < dh; ++i) out.at(start + t, i) = oc.at(t, i);
    }
    out = RmsNorm(out, w.o_norm);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t i = 0; i < dh; ++i) o.at(t, head * dh + i) = out.at(t, i);
  }
  return Linear(o, w.o_proj, D);
}

// (yf + yb) @ out_proj^T. With bf16_activations, as the GPU's bf16 mode
// takes it where d_inner <= 2 d_model (a row of one direction's bf16
// outputs fits acc's row): each direction's rows rounded to bf16, their sum
// rounded again as the one product's operand. Otherwise as the sum of the
// two products: equal, and the form in which the other modes round their
// bf16 operands.
Mat OutProj(const Mat& yf, const Mat& yb, const LayerWeights& w, const ModelConfig& c) {
  if (bf16_activations && c.d_inner() <= 2 * c.d_model) {
    Mat sum = Activation(yf);
    const Mat b = Activation(yb);
    for (int64_t i = 0; i < (int64_t)sum.v.size(); ++i) sum.v[i] = Bf16(sum.v[i] + b.v[i]);
    return Linear(sum, w.out_proj, c.d_model);
  }
  Mat a = Linear(yf, w.out_proj, c.d_model);
  const Mat b = Linear(yb, w.out_proj, c.d_model);
  for (int64_t i = 0; i < (int64_t)a.v.size(); ++i) a.v[i] += b.v[i];
  return a;
}

struct LayerRefState {
  std::vector<FastWeights> fast, init;
  MixerState mamba[2];
};

LayerRefState InitialLayerState(const LayerWeights& w, const ModelConfig& c) {
  LayerRefState s;
  const int64_t dh = c.ttt.head_dim, dhh = c.fast_hidden();
  for (int64_t head = 0; head < c.ttt_heads(); ++head) {
    FastWeights f{FromFloat(w.w0 + head * dhh * dh, dhh, dh),
                  FromFloat(w.w1 + head * dh * dhh, dh, dhh),
                  FromFloat(w.w2 + head * dhh * dh, dhh, dh)};
    s.fast.push_back(f);
    s.init.push_back(f);
  }
  for (MixerState& m : s.mamba) {
    m.ssm.assign(c.ssm_heads() * c.ssm.head_dim * c.ssm.d_state, 0.0);
    m.conv = Mat(c.ssm.conv_width - 1, c.conv_channels());
  }
  return s;
}

// docs/model.md, A block. For a query set, `state` holds the context's final state
// and is left unchanged.
Mat Block(const Mat& x_in, const LayerWeights& w, const ModelConfig& c, bool is_context,
          LayerRefState* state) {
  Mat h = RmsNorm(x_in, w.norm1);
  MixerState fwd = state->mamba[kForward];
  MixerState bwd;
  bwd.ssm.assign(fwd.ssm.size(), 0.0);
  bwd.conv = Mat(fwd.conv.rows, fwd.conv.cols);
  Mat yf = Mixer(h, w.mamba[kForward], c, &fwd);
  Mat yb = Reverse(Mixer(Reverse(h), w.mamba[kBackward], c, &bwd));
  const Mat a = OutProj(yf, yb, w, c);
  std::vector<FastWeights> fast = state->fast;
  Mat t = Lact(h, w, c, is_context, &fast, state->init);
  if (is_context) {
    state->mamba[kForward] = fwd;
    state->mamba[kBackward] = bwd;
    state->fast = fast;
  }
  Mat x = x_in;
  for (int64_t i = 0; i < (int64_t)x.v.size(); ++i) x.v[i] += a.v[i] + t.v[i];
  Mat g = RmsNorm(x, w.norm2);
  Mat gate = Activation(Linear(g, w.mlp_gate, c.mlp_hidden)),
      up = Activation(Linear(g, w.mlp_up, c.mlp_hidden));
  for (int64_t i = 0; i < (int64_t)gate.v.size(); ++i) gate.v[i] = Silu(gate.v[i]) * up.v[i];
  Mat m = Linear(gate, w.mlp_down, c.d_model);
  for (int64_t i = 0; i < (int64_t)x.v.size(); ++i) x.v[i] += m.v[i];
  return x;
}

Mat RunSequence(const Model& model, const ModelConfig& c, const Tensor& tokens, bool is_context,
                std::vector<LayerRefState>* states) {
  Mat x = FromFloat(tokens.ptr(), tokens.dim(0), c.input_width());
  if (model.embed()) x = Linear(x, model.embed(), c.d_model);
  for (int i = 0; i < c.n_layers; ++i) x = Block(x, model.layer(i), c, is_context, &(*states)[i]);
  x = RmsNorm(x, model.final_norm());
  if (model.head()) x = Linear(x, model.head(), c.d_output);
  return x;
}

}  // namespace

JobOutputs RunJob(const Model& model, const ModelConfig& c, const Tensor& context,
                  const std::vector<Tensor>& queries, ReferenceOptions options) {
  struct OperandPrecision {
    explicit OperandPrecision(const ReferenceOptions& o) {
      bf16_operands = o.bf16_operands;
      bf16_activations = o.bf16_activations;
      bf16_scan = o.bf16_scan;
    }
    ~OperandPrecision() { bf16_operands = bf16_activations = bf16_scan = false; }
  } precision(options);
  std::vector<LayerRefState> states;
  for (int i = 0; i < c.n_layers; ++i) states.push_back(InitialLayerState(model.layer(i), c));
  JobOutputs out;
  const int64_t d_out = c.output_width();
  out.output = ToTensor(RunSequence(model, c, context, true, &states), {context.dim(0), d_out});
  for (const Tensor& q : queries) {
    out.queries.push_back(ToTensor(RunSequence(model, c, q, false, &states), {q.dim(0), d_out}));
  }
  const int64_t ht = c.ttt_heads(), dh = c.ttt.head_dim, dhh = c.fast_hidden();
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    const LayerRefState& s = states[i];
    TensorD w0({ht, dhh, dh}), w1({ht, dh, dhh}), w2({ht, dhh, dh});
    for (int64_t head = 0; head < ht; ++head) {
      std::copy(s.fast[head].w0.v.begin(), s.fast[head].w0.v.end(),
                w0.data.begin() + head * dhh * dh);
      std::copy(s.fast[head].w1.v.begin(), s.fast[head].w1.v.end(),
                w1.data.begin() + head * dh * dhh);
      std::copy(s.fast[head].w2.v.begin(), s.fast[head].w2.v.end(),
                w2.data.begin() + head * dhh * dh);
    }
    out.state[p + "ttt.w0"] = std::move(w0);
    out.state[p + "ttt.w1"] = std::move(w1);
    out.state[p + "ttt.w2"] = std::move(w2);
    const char* dirs[2] = {"fwd", "bwd"};
    for (int d = 0; d < 2; ++d) {
      TensorD ssm({c.ssm_heads(), c.ssm.head_dim, c.ssm.d_state});
      ssm.data = s.mamba[d].ssm;
      out.state[absl::StrCat(p, "mamba.", dirs[d], ".ssm_state")] = std::move(ssm);
      out.state[absl::StrCat(p, "mamba.", dirs[d], ".conv_state")] =
          ToTensor(s.mamba[d].conv, {c.ssm.conv_width - 1, c.conv_channels()});
    }
  }
  return out;
}

}  // namespace lact::reference
