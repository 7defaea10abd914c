#include "kernels/cpu/elementwise.h"

#include "common/half.h"

namespace lact::cpu {

void RmsNormRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float* y,
                 int64_t ldy) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + kRmsNormEps);
    float* yr = y + r * ldy;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
  }
}

void GatedRmsNormRows(float* y, int64_t ldy, const float* z, int64_t ldz, int64_t rows,
                      int64_t cols, const float* w) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    const float* zr = z + r * ldz;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] *= Silu(zr[c]);
      ss += yr[c] * yr[c];
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + kRmsNormEps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv * w[c];
  }
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
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) v[c] = Silu(v[c]);
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
