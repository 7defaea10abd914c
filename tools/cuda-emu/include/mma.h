// The emulation's nvcuda::wmma, for the shapes the lact kernels use: tf32
// m16n16k8 and bf16 m16n16k16, fp32 accumulators. Fragments are
// warp-collective as on the GPU: lane l holds elements l, l + 32, ... of its
// fragment's matrix in row-major order (the GPU's own layout is
// unspecified, so kernels may not depend on it, and one that does fails
// here). mma_sync exchanges the operands through the warp between two warp
// barriers, so every lane of the warp must call it; the products are of the
// operands' values (tf32 or bf16, exact in fp32) accumulated in fp32, k
// ascending. Loads check the pointer's 256-bit alignment and ldm as the
// CUDA documentation requires them (a multiple of 16 bytes).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_emu.h"

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

// Element: the type a fragment loads from memory (float for tf32 and the
// accumulators, __nv_bfloat16 for bf16); values are kept as float.
template <int Rows, int Cols, bool ColMajor, class Element>
struct FragmentOf {
  static constexpr int rows = Rows, cols = Cols, num_elements = Rows * Cols / 32;
  static constexpr bool col_major = ColMajor;
  using element = Element;
  float x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;
template <int M, int N, int K, class Layout>
struct fragment<matrix_a, M, N, K, precision::tf32, Layout>
    : FragmentOf<M, K, std::is_same_v<Layout, col_major>, float> {
  static_assert(M == 16 && N == 16 && K == 8, "tf32 wmma is m16n16k8");
};
template <int M, int N, int K, class Layout>
struct fragment<matrix_b, M, N, K, precision::tf32, Layout>
    : FragmentOf<K, N, std::is_same_v<Layout, col_major>, float> {
  static_assert(M == 16 && N == 16 && K == 8, "tf32 wmma is m16n16k8");
};
template <int M, int N, int K, class Layout>
struct fragment<matrix_a, M, N, K, __nv_bfloat16, Layout>
    : FragmentOf<M, K, std::is_same_v<Layout, col_major>, __nv_bfloat16> {
  static_assert(M == 16 && N == 16 && K == 16, "the emulated bf16 wmma is m16n16k16");
};
template <int M, int N, int K, class Layout>
struct fragment<matrix_b, M, N, K, __nv_bfloat16, Layout>
    : FragmentOf<K, N, std::is_same_v<Layout, col_major>, __nv_bfloat16> {
  static_assert(M == 16 && N == 16 && K == 16, "the emulated bf16 wmma is m16n16k16");
};
template <int M, int N, int K>
struct fragment<accumulator, M, N, K, float, void> : FragmentOf<M, N, false, float> {};

inline int EmuLane() { return static_cast<int>(threadIdx.x % 32); }

// Element e of a Rows x Cols matrix stored with leading dimension ldm.
template <class Frag>
inline int64_t EmuOffset(int e, unsigned ldm, bool col_major) {
  const int r = e / Frag::cols, c = e % Frag::cols;
  return col_major ? int64_t{c} * ldm + r : int64_t{r} * ldm + c;
}

template <class Frag>
inline void load_matrix_sync(Frag& f, const float* p, unsigned ldm) {
  static_assert(std::is_same_v<typename Frag::element, float>, "a bf16 fragment loads bf16");
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    emu::Die("wmma::load_matrix_sync: pointer not 256-bit aligned");
  if (ldm % 4 != 0) emu::Die("wmma::load_matrix_sync: ldm not a multiple of 4 floats");
  for (int i = 0; i < Frag::num_elements; ++i)
    f.x[i] = p[EmuOffset<Frag>(EmuLane() + 32 * i, ldm, Frag::col_major)];
}

template <class Frag>
inline void load_matrix_sync(Frag& f, const __nv_bfloat16* p, unsigned ldm) {
  static_assert(std::is_same_v<typename Frag::element, __nv_bfloat16>,
                "only a bf16 fragment loads bf16");
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    emu::Die("wmma::load_matrix_sync: pointer not 256-bit aligned");
  if (ldm % 8 != 0) emu::Die("wmma::load_matrix_sync: ldm not a multiple of 8 bf16");
  for (int i = 0; i < Frag::num_elements; ++i)
    f.x[i] = __bfloat162float(p[EmuOffset<Frag>(EmuLane() + 32 * i, ldm, Frag::col_major)]);
}

template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  using Frag = fragment<accumulator, M, N, K, float>;
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    emu::Die("wmma::load_matrix_sync: pointer not 256-bit aligned");
  if (ldm % 4 != 0) emu::Die("wmma::load_matrix_sync: ldm not a multiple of 4 floats");
  for (int i = 0; i < Frag::num_elements; ++i)
    f.x[i] = p[EmuOffset<Frag>(EmuLane() + 32 * i, ldm, layout == mem_col_major)];
}

template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f,
                              unsigned ldm, layout_t layout) {
  using Frag = fragment<accumulator, M, N, K, float>;
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    emu::Die("wmma::store_matrix_sync: pointer not 256-bit aligned");
  if (ldm % 4 != 0) emu::Die("wmma::store_matrix_sync: ldm not a multiple of 4 floats");
  for (int i = 0; i < Frag::num_elements; ++i)
    p[EmuOffset<Frag>(EmuLane() + 32 * i, ldm, layout == mem_col_major)] = f.x[i];
}

template <class Frag>
inline void fill_fragment(Frag& f, float v) {
  for (float& e : f.x) e = v;
}

// fp32 to tf32 (10 mantissa bits), round to nearest with ties away from
// zero (cvt.rna.tf32.f32), kept in a float.
inline float __float_to_tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&v, &u, 4);
  return v;
}

template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                     const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b,
                     const fragment<accumulator, M, N, K, float>& c) {
  static_assert(M * K + K * N <= emu::kMmaExchange, "mma operands beyond the exchange");
  emu::BlockState& block = emu::B();
  float* ex = block.mma_exchange.data() + static_cast<size_t>(threadIdx.x / 32) * emu::kMmaExchange;
  const int lane = EmuLane();
  emu::SyncWarp();  // the warp's previous mma has read the exchange
  for (int i = 0; i < M * K / 32; ++i) ex[lane + 32 * i] = a.x[i];
  for (int i = 0; i < K * N / 32; ++i) ex[M * K + lane + 32 * i] = b.x[i];
  emu::SyncWarp();
  for (int i = 0; i < M * N / 32; ++i) {
    const int e = lane + 32 * i, r = e / N, col = e % N;
    float sum = c.x[i];
    for (int k = 0; k < K; ++k) sum += ex[r * K + k] * ex[M * K + k * N + col];
    d.x[i] = sum;
  }
}

}  // namespace wmma
}  // namespace nvcuda
