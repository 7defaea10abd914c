#include "kernels/cpu/newton_schulz.h"

#include <cmath>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/blas.h"

namespace lact::cpu {
namespace {

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;

void RoundAll(std::vector<float>* m) {
  for (float& v : *m) v = RoundToBFloat16(v);
}

// One float32 step on x [r, k]: x <- a x + (b A + c A A) x, A = x x^T.
void StepFp32(std::vector<float>* x, int64_t r, int64_t k, std::vector<float>* a,
              std::vector<float>* b, std::vector<float>* next) {
  Gemm(false, true, r, r, k, 1.0f, x->data(), k, x->data(), k, 0.0f, a->data(), r);
  Gemm(false, false, r, r, r, kC, a->data(), r, a->data(), r, 0.0f, b->data(), r);
  for (int64_t i = 0; i < r * r; ++i) (*b)[i] += kB * (*a)[i];
  *next = *x;
  Gemm(false, false, r, k, r, 1.0f, b->data(), r, x->data(), k, kA, next->data(), k);
  x->swap(*next);
}

// The same with torch's bf16 rounding after each operation, in upstream's
// order: B = b A + (c A) A, x <- a x + B x.
void StepBf16(std::vector<float>* x, int64_t r, int64_t k, std::vector<float>* a,
              std::vector<float>* b, std::vector<float>* next) {
  Gemm(false, true, r, r, k, 1.0f, x->data(), k, x->data(), k, 0.0f, a->data(), r);
  RoundAll(a);
  std::vector<float> ca(r * r);
  for (int64_t i = 0; i < r * r; ++i) ca[i] = RoundToBFloat16(kC * (*a)[i]);
  Gemm(false, false, r, r, r, 1.0f, ca.data(), r, a->data(), r, 0.0f, b->data(), r);
  for (int64_t i = 0; i < r * r; ++i) {
    (*b)[i] = RoundToBFloat16(RoundToBFloat16(kB * (*a)[i]) + RoundToBFloat16((*b)[i]));
  }
  Gemm(false, false, r, k, r, 1.0f, b->data(), r, x->data(), k, 0.0f, next->data(), k);
  for (int64_t i = 0; i < r * k; ++i) {
    (*next)[i] = RoundToBFloat16(RoundToBFloat16(kA * (*x)[i]) + RoundToBFloat16((*next)[i]));
  }
  x->swap(*next);
}

}  // namespace

void NewtonSchulz(float* g, int64_t rows, int64_t cols, int steps, bool bf16) {
  const int64_t size = rows * cols;
  if (bf16) {
    for (int64_t i = 0; i < size; ++i) g[i] = RoundToBFloat16(g[i]);
  }
  double norm = 0;
  for (int64_t i = 0; i < size; ++i) norm += static_cast<double>(g[i]) * g[i];
  const float inv = static_cast<float>(1.0 / (std::sqrt(norm) + 1e-7));
  const float denom = RoundToBFloat16(RoundToBFloat16(static_cast<float>(std::sqrt(norm))) + 1e-7f);
  const bool transposed = rows > cols;
  const int64_t r = transposed ? cols : rows, k = transposed ? rows : cols;
  std::vector<float> x(size), a(r * r), b(r * r), next(size);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = g[i * cols + j];
      (transposed ? x[j * k + i] : x[i * k + j]) = bf16 ? RoundToBFloat16(v / denom) : v * inv;
    }
  }
  for (int s = 0; s < steps; ++s) {
    (bf16 ? StepBf16 : StepFp32)(&x, r, k, &a, &b, &next);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) g[i * cols + j] = transposed ? x[j * k + i] : x[i * k + j];
}

}  // namespace lact::cpu
