#include "kernels/cpu/elementwise.h"

#include <type_traits>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/simd.h"

namespace lact::cpu {

namespace {

template <typename Out>
void RmsNorm(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, Out* y,
             int64_t ldy) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + kRmsNormEps);
    Out* yr = y + r * ldy;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) Put(xr[c] * inv * w[c], yr + c);
  }
}

// out[r] = rmsnorm(y[r] * silu(z[r]), w), the gated row held in `gated`
// (a row of cols floats: y's own where out is y, else a thread's scratch,
// so that y is not written back).
template <typename Out>
void GatedRmsNorm(const float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                  int64_t cols, const float* w, Out* out, int64_t ldo) {
#pragma omp parallel
  {
    std::vector<float> scratch(std::is_same_v<Out, float> ? 0 : cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* yr = y + r * ldy;
      const float* zr = z + r * ldz;
      Out* o = out + r * ldo;
      float* gated;
      if constexpr (std::is_same_v<Out, float>) {
        gated = o;
      } else {
        gated = scratch.data();
      }
      Vec squares{};
      float ss = 0.0f;
      ForEachVector(cols, [&](int64_t c, auto like) {
        const auto v = LoadLike(like, yr + c) * SiluOf(LoadLike(like, zr + c));
        Put(v, gated + c);
        if constexpr (std::is_same_v<decltype(like), Vec>) {
          squares += v * v;
        } else {
          ss += v * v;
        }
      });
      for (int l = 0; l < kLanes; ++l) ss += squares[l];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + kRmsNormEps);
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) Put(gated[c] * (inv * w[c]), o + c);
    }
  }
}

}  // namespace

void RmsNormRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float* y,
                 int64_t ldy) {
  RmsNorm(x, ldx, rows, cols, w, y, ldy);
}

void RmsNormRowsToBf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w,
                       uint16_t* y) {
  RmsNorm(x, ldx, rows, cols, w, y, cols);
}

void GatedRmsNormRows(float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                      int64_t cols, const float* w) {
  GatedRmsNorm(y, ldy, z, ldz, rows, cols, w, y, ldy);
}

void GatedRmsNormRowsToBf16(const float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                            int64_t cols, const float* w, uint16_t* out) {
  GatedRmsNorm(y, ldy, z, ldz, rows, cols, w, out, cols);
}

void L2NormGroups(float* x, int64_t ldx, int64_t rows, int64_t groups, int64_t group) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float* v = x + r * ldx + g * group;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < group; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / (std::sqrt(ss) + kL2NormEps);
#pragma omp simd
      for (int64_t i = 0; i < group; ++i) v[i] *= inv;
    }
  }
}

void SiluRows(float* x, int64_t ldx, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * ldx;
    ForEachVector(cols, [&](int64_t c, auto like) { Put(SiluOf(LoadLike(like, v + c)), v + c); });
  }
}

void PackRowsToBf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* o = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = FloatToBFloat16(xr[c]);
  }
}

void RoundRowsToBf16(float* x, int64_t ldx, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * ldx;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) v[c] = RoundToBFloat16(v[c]);
  }
}

}  // namespace lact::cpu
