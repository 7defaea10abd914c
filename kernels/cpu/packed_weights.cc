#include "kernels/cpu/packed_weights.h"

#include <omp.h>

#include <dnnl.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/dnnl_engine.h"
#include "kernels/cpu/elementwise.h"

namespace lact::cpu {
namespace {

using dnnl::memory;

memory::data_type Type(bool bf16) {
  return bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

bool Brgemm(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
}

// The row count the weights' layout is asked for with; oneDNN's choice of
// layout does not depend on it (checked for every shape each primitive is
// made for, below).
constexpr int64_t kProbeRows = 512;

// A matmul's shape and thread count: what a primitive is made for. The
// weights' layout is a function of (in, out, bf16) on this CPU.
using Shape = std::tuple<int64_t, int64_t, bool, int64_t, int64_t, int64_t, bool, int>;

struct Primitive {
  bool ok = false;  // false: oneDNN runs no brgemm kernel on the packed layout
  dnnl::matmul matmul;
  memory::desc src, dst;
};

// One thread's primitives, stream and bf16 packing scratch.
struct ThreadState {
  std::map<Shape, Primitive> primitives;
  dnnl::stream stream{DnnlEngine()};
  std::vector<uint16_t> x;
};

}  // namespace

struct PackedWeights::Weight {
  memory::desc desc;
  memory data;
};

PackedWeights::PackedWeights() = default;
PackedWeights::~PackedWeights() = default;

int64_t PackedWeights::size() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [key, weight] : weights_) n += weight != nullptr;
  return n;
}

const PackedWeights::Weight* PackedWeights::Get(const Key& key) {
  absl::MutexLock lock(&mu_);
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second.get();
  // Recorded only once packed, or known to have no brgemm kernel: a throw
  // below (oneDNN, memory) leaves the weight to be tried again.
  const auto [w, out, in, bf16] = key;
  // w[out, in] row-major is B[in, out] with strides {1, in}.
  const memory::desc plain({in, out}, Type(bf16), memory::dims{1, in});
  const memory::desc src({kProbeRows, in}, Type(bf16), memory::dims{in, 1});
  const memory::desc dst({kProbeRows, out}, memory::data_type::f32, memory::dims{out, 1});
  const memory::desc any({in, out}, Type(bf16), memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), DnnlEngine());
  if (!Brgemm(pd)) {
    weights_[key] = nullptr;
    return nullptr;
  }
  std::vector<uint16_t> rounded;
  void* from = const_cast<float*>(w);  // oneDNN takes non-const handles; a reorder reads them
  if (bf16) {
    rounded.resize(out * in);
    PackRowsToBf16(w, in, out, in, rounded.data());
    from = rounded.data();
  }
  auto weight = std::make_unique<Weight>();
  weight->desc = pd.weights_desc();
  weight->data = memory(weight->desc, DnnlEngine());
  memory source(plain, DnnlEngine(), from);
  dnnl::stream stream(DnnlEngine());
  dnnl::reorder(source, weight->data).execute(stream, source, weight->data);
  stream.wait();
  return (weights_[key] = std::move(weight)).get();
}

bool PackedWeights::Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w,
                           int64_t out, float* y, int64_t ldy, float beta, bool bf16) {
  return Multiply({x, nullptr, ldx}, rows, in, w, out, y, ldy, beta, bf16);
}

bool PackedWeights::LinearBf16(const uint16_t* x, int64_t rows, int64_t in, const float* w,
                               int64_t out, float* y, int64_t ldy, float beta) {
  return Multiply({nullptr, x, in}, rows, in, w, out, y, ldy, beta, /*bf16=*/true);
}

bool PackedWeights::Multiply(const Source& x, int64_t rows, int64_t in, const float* w, int64_t out,
                             float* y, int64_t ldy, float beta, bool bf16) {
  if (rows == 0) return true;
  if (rows < 0 || in <= 0 || out <= 0 || (beta != 0.0f && beta != 1.0f)) return false;
  if (bf16 && !HasBf16Matmul()) return false;
  try {
    const Weight* weight = Get({w, out, in, bf16});
    if (weight == nullptr) return false;
    thread_local ThreadState state;
    const int64_t src_ld = bf16 ? in : x.ld;  // bf16 rows are dense
    const Shape shape{in, out, bf16, rows, src_ld, ldy, beta != 0.0f, omp_get_max_threads()};
    auto it = state.primitives.find(shape);
    if (it == state.primitives.end()) {
      if (state.primitives.size() >= static_cast<size_t>(kMaxPrimitives)) state.primitives.clear();
      Primitive p;
      p.src = memory::desc({rows, in}, Type(bf16), memory::dims{src_ld, 1});
      p.dst = memory::desc({rows, out}, memory::data_type::f32, memory::dims{ldy, 1});
      dnnl::primitive_attr attr;
      if (beta != 0.0f) {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        attr.set_post_ops(sum);
      }
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, weight->desc, p.dst), attr,
                                            DnnlEngine());
      p.ok = Brgemm(pd) && pd.weights_desc() == weight->desc;
      if (p.ok) p.matmul = dnnl::matmul(pd);
      it = state.primitives.emplace(shape, std::move(p)).first;
    }
    const Primitive& p = it->second;
    if (!p.ok) return false;
    // oneDNN takes non-const handles; a matmul only reads its source.
    void* src = x.bf16 != nullptr ? static_cast<void*>(const_cast<uint16_t*>(x.bf16))
                                  : static_cast<void*>(const_cast<float*>(x.f32));
    if (bf16 && x.bf16 == nullptr) {  // float32 rows, packed to bf16 here
      state.x.resize(rows * in);
      PackRowsToBf16(x.f32, x.ld, rows, in, state.x.data());
      src = state.x.data();
    }
    memory src_mem(p.src, DnnlEngine(), src);
    memory dst_mem(p.dst, DnnlEngine(), y);
    p.matmul.execute(
        state.stream,
        {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, weight->data}, {DNNL_ARG_DST, dst_mem}});
    state.stream.wait();
    return true;
  } catch (const std::exception&) {
    // oneDNN fails (or memory runs out) as it creates, packs or checks,
    // before it writes y.
    return false;
  }
}

}  // namespace lact::cpu
