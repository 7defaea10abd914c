#include "kernels/cpu/small_gemm.h"

#include <algorithm>

#include "kernels/cpu/simd.h"

namespace lact::cpu {
namespace {

// The row block: kRows x kVecs accumulators plus kVecs of B in vector
// registers (32 zmm with AVX-512, 16 ymm without). With AVX-512, 8 rows of
// 2 vectors (19 registers) ran the SSD scan 1.06x faster on 2 threads than
// 6 rows of 4 (28) on a Zen 5 core: the scan's products have 32 or 64
// rows, which 8 divides (6 left blocks of 2 or 4 rows, bound by their
// loads), and a block's 10 loads per 16 multiply-adds keep the FMA units
// busy.
#if defined(__AVX512F__)
constexpr int kRows = 8;
constexpr int kVecs = 2;
#else
constexpr int kRows = 3;
constexpr int kVecs = 4;
#endif

// The operands and scales of one SmallGemm call.
struct Args {
  const float* a;
  int64_t a_row, a_col;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  const float* row_scale;
};

// R rows x V vectors of C, from row i and column j on.
template <int R, int V>
void Block(const Args& g, int64_t i, int64_t j, int64_t depth) {
  const float* a = g.a + i * g.a_row;
  const int64_t a_row = g.a_row, a_col = g.a_col, ldb = g.ldb;
  const float* b = g.b + j;
  // The loops over r and v unrolled, so that acc lives in registers (not
  // on the stack, zeroed and reloaded around the k loop).
  Vec acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = Vec{};
  for (int64_t k = 0; k < depth; ++k) {
    const float* bk = b + k * ldb;
    Vec bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = Load(bk + v * kLanes);
    const float* ak = a + k * a_col;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float s = ak[r * a_row];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] += s * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float scale = g.row_scale != nullptr ? g.row_scale[i + r] : 1.0f;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* p = g.c + (i + r) * g.ldc + j + v * kLanes;
      const Vec sum = scale * acc[r][v];
      Store(p, g.beta == 0.0f ? sum : sum + g.beta * Load(p));
    }
  }
}

// The columns [first, cols) that fill no vector, one at a time.
void Tail(const Args& g, int64_t rows, int64_t first, int64_t cols, int64_t depth, bool lower) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t d = lower ? std::min(depth, i + 1) : depth;
    const float scale = g.row_scale != nullptr ? g.row_scale[i] : 1.0f;
    for (int64_t j = first; j < cols; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < d; ++k) {
        sum += g.a[i * g.a_row + k * g.a_col] * g.b[k * g.ldb + j];
      }
      float& out = g.c[i * g.ldc + j];
      out = g.beta == 0.0f ? scale * sum : scale * sum + g.beta * out;
    }
  }
}

// The last r < kRows rows from row i: one block of exactly r rows.
template <int V, int R = kRows - 1>
void Remainder(const Args& g, int64_t r, int64_t i, int64_t j, int64_t depth) {
  if constexpr (R > 0) {
    if (r == R) return Block<R, V>(g, i, j, depth);
    Remainder<V, R - 1>(g, r, i, j, depth);
  }
}

// Every row block of the V vectors of columns from j on.
template <int V>
void Rows(const Args& g, int64_t rows, int64_t j, int64_t depth, bool lower) {
  int64_t i = 0;
  for (; i + kRows <= rows; i += kRows)
    Block<kRows, V>(g, i, j, lower ? std::min(depth, i + kRows) : depth);
  Remainder<V>(g, rows - i, i, j, lower ? std::min(depth, rows) : depth);
}

// The last v < kVecs vectors of columns from j on.
template <int V = kVecs - 1>
void Columns(const Args& g, int64_t rows, int64_t v, int64_t j, int64_t depth, bool lower) {
  if constexpr (V > 0) {
    if (v == V) return Rows<V>(g, rows, j, depth, lower);
    Columns<V - 1>(g, rows, v, j, depth, lower);
  }
}

}  // namespace

void SmallGemm(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
               bool lower, const float* row_scale) {
  if (rows <= 0 || cols <= 0) return;
  const Args g{a, a_row, a_col, b, ldb, beta, c, ldc, row_scale};
  int64_t j = 0;
  for (; j + kVecs * kLanes <= cols; j += kVecs * kLanes) Rows<kVecs>(g, rows, j, depth, lower);
  Columns(g, rows, (cols - j) / kLanes, j, depth, lower);
  j += (cols - j) / kLanes * kLanes;
  if (j < cols) Tail(g, rows, j, cols, depth, lower);
}

}  // namespace lact::cpu
