// PassSegmentStates (ssd_pass_states.h): one block of kThreads per head and
// kThreads entries of its state; each thread carries its entry through the
// segments in order, loading the segment states in batches so that the
// next batch is in flight while one is folded in.
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ssd_pass_states.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

// Segment states PassStates loads at once per thread (two batches in flight).
constexpr int kPassBatch = 8;

// Carries the state through the segments for head h = blockIdx.y, one
// thread per entry (n, p) of S^T: s <- exp(decay_g) s + segment_g. With
// `write_carry` each segment's slot is overwritten with the state entering
// it. The final state goes back to `state` ([H][P][N]) and the total log
// decay is added to log_decay[h].
__global__ void PassStatesKernel(int heads, int head_dim, int d_state, SegmentStates g,
                                 bool write_carry, float* state, float* log_decay) {
  __shared__ float factor[kThreads];
  const int h = blockIdx.y, per_head = head_dim * d_state;
  const int e = blockIdx.x * kThreads + threadIdx.x;
  const bool active = e < per_head;
  const int64_t own =
      (static_cast<int64_t>(h) * head_dim + e % head_dim) * d_state + e / head_dim;  // [h][p][n]
  float* entry = g.states + static_cast<int64_t>(h) * per_head + e;  // segment 0's, [h][n][p]
  const int64_t stride = static_cast<int64_t>(heads) * per_head;     // from one segment to the next
  float s = active ? state[own] : 0.0f;
  float decay_sum = 0.0f;
  for (int64_t g0 = 0; g0 < g.segments; g0 += kThreads) {
    const int count = static_cast<int>(min(static_cast<int64_t>(kThreads), g.segments - g0));
    __syncthreads();  // the previous batch of factors is consumed
    if (threadIdx.x < count) {
      const float d = g.decay[(g0 + threadIdx.x) * heads + h];
      factor[threadIdx.x] = expf(d);
      decay_sum += d;
    }
    __syncthreads();
    if (!active) continue;
    // Two batches of segment states in flight: the next batch is loaded
    // before this one is folded in and overwritten.
    const auto load = [&](int k0, float(&into)[kPassBatch]) {
#pragma unroll
      for (int k = 0; k < kPassBatch; ++k)
        into[k] = k0 + k < count ? entry[(g0 + k0 + k) * stride] : 0.0f;
    };
    float next[kPassBatch];
    load(0, next);
    for (int k0 = 0; k0 < count; k0 += kPassBatch) {
      float local[kPassBatch];
#pragma unroll
      for (int k = 0; k < kPassBatch; ++k) local[k] = next[k];
      if (k0 + kPassBatch < count) load(k0 + kPassBatch, next);
#pragma unroll
      for (int k = 0; k < kPassBatch; ++k) {
        if (k0 + k < count) {
          if (write_carry) entry[(g0 + k0 + k) * stride] = s;
          s = factor[k0 + k] * s + local[k];
        }
      }
    }
  }
  if (active) state[own] = s;
  if (log_decay != nullptr && blockIdx.x == 0) {
    const float total = BlockSum(decay_sum);
    if (threadIdx.x == 0) log_decay[h] += total;
  }
}

}  // namespace

absl::Status PassSegmentStates(cudaStream_t s, int heads, int head_dim, int d_state,
                               const SegmentStates& g, bool write_carry, float* state,
                               float* log_decay) {
  const dim3 grid(Blocks(int64_t{head_dim} * d_state), heads);
  PassStatesKernel<<<grid, kThreads, 0, s>>>(heads, head_dim, d_state, g, write_carry, state,
                                             log_decay);
  const int64_t per_state = int64_t{heads} * head_dim * d_state;
  NoteLaunch("PassSegmentStates", 4 * (g.segments * (per_state + heads) + per_state),
             4 * ((write_carry ? g.segments * per_state : 0) + per_state));
  return LaunchStatus("SsdScan pass states");
}

}  // namespace lact::cuda
