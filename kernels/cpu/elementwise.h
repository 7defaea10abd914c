// Row-wise normalisations and the scalar activations of SPEC.md, float32.
// Loops run in parallel over rows on the shared OpenMP pool.
#ifndef LACT_KERNELS_CPU_ELEMENTWISE_H_
#define LACT_KERNELS_CPU_ELEMENTWISE_H_

#include <cmath>
#include <cstdint>

namespace lact::cpu {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline double InvSoftplus(double y) { return y + std::log(-std::expm1(-y)); }

constexpr float kRmsNormEps = 1e-5f;
constexpr float kL2NormEps = 1e-5f;

// y[r, :cols] = x[r] / sqrt(mean(x[r]^2) + eps) * w. y may alias x.
void RmsNormRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, const float* w, float* y, int64_t ldy);

// x[r, g*group:(g+1)*group] /= (||.||_2 + eps) for every group, in place.
void L2NormGroups(float* x, int64_t ldx, int64_t rows, int64_t groups, int64_t group);

// x[r, c] = silu(x[r, c]) in place.
void SiluRows(float* x, int64_t ldx, int64_t rows, int64_t cols);

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_ELEMENTWISE_H_
