#include "kernels/cpu/bf16_matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <dnnl.hpp>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cpu/dnnl_engine.h"
#include "kernels/cpu/elementwise.h"

namespace lact::cpu {
namespace {

using dnnl::memory;

// A matmul's shape, and the thread count it runs with: what a primitive
// is created for (oneDNN fixes a primitive's threads when it is made).
using Shape = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, bool, int>;

dnnl::matmul::primitive_desc Describe(const Shape& s) {
  const auto [trans_a, trans_b, m, n, k, ldc, accumulate, threads] = s;
  // Packed A and B keep the layout they had: a transpose is a stride.
  const memory::desc a({m, k}, memory::data_type::bf16,
                       trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc b({k, n}, memory::data_type::bf16,
                       trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc c({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, DnnlEngine());
}

struct Probe {
  bool ok = false;
  std::string kernel;
};

const Probe& GetProbe() {
  static const Probe* const probe = [] {
    auto* p = new Probe;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
      p->kernel = "none: this CPU has no AVX512_BF16";
      return p;
    }
    try {
      const std::string impl =
          Describe({false, true, 256, 256, 256, 256, false, 1}).impl_info_str();
      p->ok = impl.rfind("ref", 0) != 0;
      p->kernel = p->ok ? impl : "none: oneDNN offers only its reference kernel (" + impl + ")";
    } catch (const dnnl::error& e) {
      p->kernel = std::string("none: oneDNN refuses a bf16 matmul (") + e.what() + ")";
    }
    return p;
  }();
  return *probe;
}

// -1 until SetBf16Matmul: until then the default (bf16_matmul.h).
std::atomic<int> use_matmul{-1};

// rows x cols of x (leading dimension ld), packed densely as bf16.
void Pack(const float* x, int64_t ld, int64_t rows, int64_t cols, std::vector<uint16_t>* out) {
  out->resize(rows * cols);
  PackRowsToBf16(x, ld, rows, cols, out->data());
}

struct Primitive {
  Primitive(const dnnl::matmul::primitive_desc& pd, bool dense_c)
      : matmul(pd), a(pd.src_desc()), b(pd.weights_desc()), c(pd.dst_desc()), dense_c(dense_c) {}
  dnnl::matmul matmul;
  memory::desc a, b, c;
  // Whether C goes through a dense [m, n] scratch (see Create).
  bool dense_c;
};

// The primitive for `s`. oneDNN 2.6 runs its bf16 brgemm kernels only on a
// dense C: one whose rows are wider than n (a head's columns of a wider
// tensor) falls back to gemm:jit at about half the rate, so such a C goes
// through a dense scratch where that makes the brgemm kernel run.
Primitive Create(const Shape& s) {
  const auto brgemm = [](const dnnl::matmul::primitive_desc& pd) {
    return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
  };
  dnnl::matmul::primitive_desc pd = Describe(s);
  const int64_t n = std::get<3>(s), ldc = std::get<5>(s);
  if (ldc != n && !brgemm(pd)) {
    Shape dense = s;
    std::get<5>(dense) = n;
    dnnl::matmul::primitive_desc dense_pd = Describe(dense);
    if (brgemm(dense_pd)) return Primitive(dense_pd, true);
  }
  return Primitive(pd, false);
}

// One thread's primitives, stream and packing scratch.
struct ThreadState {
  std::map<Shape, Primitive> primitives;
  dnnl::stream stream{DnnlEngine()};
  std::vector<uint16_t> a, b;
  std::vector<float> c;  // a dense C, for a primitive with dense_c
};

}  // namespace

bool HasBf16Matmul() { return GetProbe().ok; }

std::string Bf16MatmulKernel() { return GetProbe().kernel; }

void SetBf16Matmul(bool on) { use_matmul = on && HasBf16Matmul() ? 1 : 0; }

namespace {

struct Default {
  bool on;
  std::string reason;
};

const Default& GetDefault() {
  static const Default* const d = [] {
    if (!HasBf16Matmul()) return new Default{false, Bf16MatmulKernel()};
    const bool amx = Bf16MatmulKernel().find("amx") != std::string::npos;
    const bool amd = __builtin_cpu_is("amd") != 0;  // GetProbe ran __builtin_cpu_init
    const bool on = amx || amd;
    std::string reason = amx   ? "runs on AMX"
                         : amd ? "AMD's AVX512_BF16: a bf16 dot product does two float32 FMAs' work"
                               : "Intel without AMX: not faster than sgemm; LACT_CPU_BF16_MATMUL=1 "
                                 "uses it";
    if (const char* env = std::getenv("LACT_CPU_BF16_MATMUL"); env != nullptr && *env != 0) {
      const std::string value = env;
      for (const char* yes : {"1", "true", "on", "yes"})
        if (value == yes) return new Default{true, "LACT_CPU_BF16_MATMUL=" + value};
      for (const char* no : {"0", "false", "off", "no"})
        if (value == no) return new Default{false, "LACT_CPU_BF16_MATMUL=" + value};
      reason += "; LACT_CPU_BF16_MATMUL=" + value + " ignored (allowed: 1, true, on, yes, 0, " +
                "false, off, no)";
    }
    return new Default{on, reason};
  }();
  return *d;
}

}  // namespace

std::string Bf16MatmulReason() {
  return use_matmul < 0 ? GetDefault().reason : "set in this process";
}

bool Bf16MatmulOn() {
  const int mode = use_matmul;
  return mode < 0 ? GetDefault().on : mode == 1;
}

bool MatmulBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                const uint16_t* a_bf16, const uint16_t* b_bf16) {
  if (m == 0 || n == 0) return true;
  if (k == 0 || (beta != 0.0f && beta != 1.0f) || !HasBf16Matmul()) return false;
  try {
    thread_local ThreadState state;
    const Shape shape{trans_a, trans_b, m, n, k, ldc, beta != 0.0f, omp_get_max_threads()};
    auto it = state.primitives.find(shape);
    if (it == state.primitives.end()) {
      if (state.primitives.size() >= static_cast<size_t>(kMaxPrimitives)) state.primitives.clear();
      it = state.primitives.emplace(shape, Create(shape)).first;
    }
    // A and B as the primitive takes them: dense bf16 (Describe).
    const uint16_t* pa = a_bf16;
    if (pa == nullptr || lda != (trans_a ? m : k)) {
      Pack(a, lda, trans_a ? k : m, trans_a ? m : k, &state.a);
      pa = state.a.data();
    }
    const uint16_t* pb = b_bf16;
    if (pb == nullptr || ldb != (trans_b ? k : n)) {
      Pack(b, ldb, trans_b ? n : k, trans_b ? k : n, &state.b);
      pb = state.b.data();
    }
    const Primitive& p = it->second;
    float* out = c;
    if (p.dense_c) {
      state.c.resize(m * n);
      out = state.c.data();
      if (beta != 0.0f) {
        for (int64_t r = 0; r < m; ++r) std::copy_n(c + r * ldc, n, out + r * n);
      }
    }
    // oneDNN takes a handle to non-const memory; a matmul only reads it.
    memory src(p.a, DnnlEngine(), const_cast<uint16_t*>(pa));
    memory weights(p.b, DnnlEngine(), const_cast<uint16_t*>(pb));
    memory dst(p.c, DnnlEngine(), out);
    p.matmul.execute(state.stream,
                     {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    state.stream.wait();
    if (p.dense_c) {
      for (int64_t r = 0; r < m; ++r) std::copy_n(out + r * n, n, c + r * ldc);
    }
    return true;
  } catch (const std::exception&) {
    return false;  // oneDNN fails as it creates or checks, before it writes C
  }
}

}  // namespace lact::cpu
