// The bf16 tensor-core scan of ssd_scan_bf16.h. One block of 8 warps per
// (segment, head); the running state S [p][n] (padded to 64 x 128) is 32
// fp32 accumulator fragments, 4 per warp (warp w: rows 16 (w / 2), columns
// 16 (4 (w % 2) + f)). Per chunk, with cum_i = sum_{k<=i} dt_k A inside it:
//   1. x, B, C (bf16, 16 bytes at a time) and dt into shared memory; with
//      outputs, the carry-in S as bf16 too;
//   2. cum, in token order by one thread (as the fp32 scan); G = C B^T;
//   3. M_ij = G_ij exp(cum_i - cum_j) dt_j for j <= i, as bf16; in place,
//      C_i <- exp(cum_i) C_i and B_j <- exp(cum_last - cum_j) dt_j B_j;
//   4. y = M X + C S^T + D x, and S <- exp(cum_last) S + X^T B.
// The state-only walk does 1, 2 and 4 without C, G, M or y. Shared memory
// is about 80 KB a block, so that two blocks share a multiprocessor.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ssd_pass_states.h"
#include "kernels/cuda/ssd_scan_bf16.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kQ = 64;                  // tokens per chunk
constexpr int kP = kSsdBf16MaxHeadDim;  // a head's channels, padded
constexpr int kN = kSsdBf16MaxState;    // state size, padded
constexpr int kF = 16;                  // fragment side (m16n16k16)
constexpr int kWarps = 8;
constexpr int kBlockThreads = 32 * kWarps;
// Row pitches of the bf16 tiles: 16 bytes past a multiple of 128, so that
// the 8 rows of a fragment's load fall in distinct banks.
constexpr int kLdX = kP + 8, kLdB = kN + 8, kLdM = kQ + 8;
constexpr int kLdStage = kF + 4;  // floats
constexpr int kStateFrags = 4;    // per warp
static_assert(kP / kF * (kN / kF) == kWarps * kStateFrags, "each warp holds 4 state fragments");
static_assert(kQ / kF == 4 && kP / kF == 4 && kN / kF == 8, "the warp assignments below");

using FragA = wmma::fragment<wmma::matrix_a, kF, kF, kF, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, kF, kF, kF, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, kF, kF, kF, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, kF, kF, kF, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, kF, kF, kF, float>;

// A block's shared memory (dynamic). Every tile starts on a 32-byte
// boundary, as wmma loads and stores need.
struct Tiles {
  bf16 x[kQ][kLdX];  // the chunk's x, [token][p]
  bf16 b[kQ][kLdB];  // B, then B_j exp(cum_last - cum_j) dt_j
  bf16 c[kQ][kLdB];  // C, then C_i exp(cum_i)
  bf16 m[kQ][kLdM];  // the intra-chunk weights M (blocks on and below the diagonal)
  bf16 s[kP][kLdB];  // the carry-in state, [p][n]
  float stage[kWarps][kF][kLdStage];  // a warp's fragment on its way to or from elements
  float dt[kQ], cum[kQ], weight[kQ], growth[kQ];
};
static_assert(offsetof(Tiles, b) % 32 == 0 && offsetof(Tiles, c) % 32 == 0 &&
                  offsetof(Tiles, m) % 32 == 0 && offsetof(Tiles, s) % 32 == 0 &&
                  offsetof(Tiles, stage) % 32 == 0,
              "wmma pointers are 256-bit aligned");
constexpr int kTilesBytes = sizeof(Tiles);

// The kernels' arguments: the caller's, the chunks per segment, and the
// segments' scratch.
struct ScanArgs {
  SsdScanBf16Params p;
  int64_t segment_chunks;
  float* states;  // [segments][H][N][P]: from zero, then (with outputs) the carry-in
  float* decay;   // [segments][H]
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ inline int Warp() { return threadIdx.x / 32; }
__device__ inline int Lane() { return threadIdx.x % 32; }
__device__ inline int Tiles16(int size) { return (size + kF - 1) / kF; }

// dst[0, 8) = src[0, count), zero past count; 16 bytes at once where src
// is 16-byte aligned and count >= 8 (dst always is).
__device__ inline void Load8(const bf16* src, int count, bf16* dst) {
  if (count >= 8 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    return;
  }
#pragma unroll
  for (int q = 0; q < 8; ++q)
    dst[q] = __float2bfloat16_rn(q < count ? __bfloat162float(src[q]) : 0.0f);
}

// dst[0, count) = src[0, count) (at most 8); 16 bytes at once where it can.
__device__ inline void Store8(const bf16 (&src)[8], int count, bf16* dst) {
  if (count >= 8 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    return;
  }
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    if (q < count) dst[q] = src[q];
  }
}

// A kQ x kWidth tile from the first `rows` rows (stride ld) and `cols`
// columns of src, zero elsewhere.
template <int kWidth, int kLd>
__device__ void LoadTile(const bf16* src, int64_t ld, int rows, int cols, bf16 (*dst)[kLd]) {
  constexpr int kGroups = kWidth / 8;
  for (int e = threadIdx.x; e < kQ * kGroups; e += kBlockThreads) {
    const int j = e / kGroups, k = 8 * (e % kGroups);
    const bool inside = j < rows && k < cols;
    Load8(inside ? src + j * ld + k : src, inside ? cols - k : 0, &dst[j][k]);
  }
}

template <bool kOutputs>
__device__ void LoadChunk(const ScanArgs& a, int h, int64_t t0, int n, Tiles& t) {
  const int P = a.p.head_dim, N = a.p.d_state;
  LoadTile<kP, kLdX>(a.p.x + t0 * a.p.ldx + int64_t{h} * P, a.p.ldx, n, P, t.x);
  LoadTile<kN, kLdB>(a.p.b + t0 * a.p.ldb, a.p.ldb, n, N, t.b);
  if constexpr (kOutputs) LoadTile<kN, kLdB>(a.p.c + t0 * a.p.ldc, a.p.ldc, n, N, t.c);
  for (int j = threadIdx.x; j < kQ; j += kBlockThreads)
    t.dt[j] = j < n ? a.p.dt[(t0 + j) * a.p.lddt + h] : 0.0f;
}

// Warp 0: cum_i = sum_{k<=i} dt_k a in token order (dt is zero past the
// chunk's tokens), weight_j = exp(cum_last - cum_j) dt_j, growth_i = exp(cum_i).
__device__ void ChunkDecays(float a, Tiles& t) {
  if (threadIdx.x == 0) {
    float run = 0.0f;
    for (int i = 0; i < kQ; ++i) {
      run += t.dt[i] * a;
      t.cum[i] = run;
    }
  }
  __syncwarp();
  const float total = t.cum[kQ - 1];
  for (int i = Lane(); i < kQ; i += 32) {
    t.weight[i] = expf(total - t.cum[i]) * t.dt[i];
    t.growth[i] = expf(t.cum[i]);
  }
}

// The carry-in state at a segment's start: `slot` ([N][P], S^T) or zero.
__device__ void LoadState(const float* slot, int P, int N, Tiles& t, FragC (&state)[kStateFrags]) {
  float(*stage)[kLdStage] = t.stage[Warp()];
  const int pb = Warp() / 2;
  for (int f = 0; f < kStateFrags; ++f) {
    wmma::fill_fragment(state[f], 0.0f);
    if (slot == nullptr) continue;
    const int nb = 4 * (Warp() % 2) + f;
    for (int e = Lane(); e < kF * kF; e += 32) {
      const int n = kF * nb + e / kF, p = kF * pb + e % kF;
      stage[e / kF][e % kF] = n < N && p < P ? slot[int64_t{n} * P + p] : 0.0f;
    }
    __syncwarp();
    wmma::load_matrix_sync(state[f], &stage[0][0], kLdStage, wmma::mem_col_major);
    __syncwarp();
  }
}

// A segment's final state into `slot` ([N][P], S^T).
__device__ void StoreState(const FragC (&state)[kStateFrags], int P, int N, Tiles& t, float* slot) {
  float(*stage)[kLdStage] = t.stage[Warp()];
  const int pb = Warp() / 2;
  for (int f = 0; f < kStateFrags; ++f) {
    const int nb = 4 * (Warp() % 2) + f;
    wmma::store_matrix_sync(&stage[0][0], state[f], kLdStage, wmma::mem_col_major);
    __syncwarp();
    for (int e = Lane(); e < kF * kF; e += 32) {
      const int n = kF * nb + e / kF, p = kF * pb + e % kF;
      if (n < N && p < P) slot[int64_t{n} * P + p] = stage[e / kF][e % kF];
    }
    __syncwarp();
  }
}

// The warp's fragments, through its stage, as bf16 into the 16 x 16 block
// at `dst` (pitch ld): each lane converts 8 values of one row.
template <int kLd>
__device__ void FragmentToBf16(const FragC& frag, float (*stage)[kLdStage], bf16 (*dst)[kLd]) {
  wmma::store_matrix_sync(&stage[0][0], frag, kLdStage, wmma::mem_row_major);
  __syncwarp();
  const int r = Lane() / 2, c0 = 8 * (Lane() % 2);
  __align__(16) bf16 v[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) v[q] = __float2bfloat16_rn(stage[r][c0 + q]);
  Store8(v, 8, &dst[r][c0]);
  __syncwarp();
}

// The carry-in state as bf16 [p][n], the operand of y's product.
__device__ void StateToBf16(const FragC (&state)[kStateFrags], int ptiles, int ntiles, Tiles& t) {
  const int pb = Warp() / 2;
  for (int f = 0; f < kStateFrags; ++f) {
    const int nb = 4 * (Warp() % 2) + f;
    if (pb < ptiles && nb < ntiles)
      FragmentToBf16<kLdB>(state[f], t.stage[Warp()],
                           reinterpret_cast<bf16(*)[kLdB]>(&t.s[kF * pb][kF * nb]));
  }
}

// Warp w's two fragments of G = C B^T: row block w / 2, column blocks
// 2 (w % 2) + f; those above the diagonal are skipped (M is zero there).
__device__ void GramProducts(const Tiles& t, int ntiles, FragC (&g)[2]) {
  const int ib = Warp() / 2;
  for (int f = 0; f < 2; ++f) {
    const int jb = 2 * (Warp() % 2) + f;
    wmma::fill_fragment(g[f], 0.0f);
    if (jb > ib) continue;
    for (int kn = 0; kn < ntiles; ++kn) {
      FragA c;
      FragBT bt;
      wmma::load_matrix_sync(c, &t.c[kF * ib][kF * kn], kLdB);
      wmma::load_matrix_sync(bt, &t.b[kF * jb][kF * kn], kLdB);
      wmma::mma_sync(g[f], c, bt, g[f]);
    }
  }
}

// M_ij = G_ij exp(cum_i - cum_j) dt_j for j <= i (zero above the diagonal
// within a diagonal block), from the warp's G fragments.
__device__ void MixingWeights(const FragC (&g)[2], Tiles& t) {
  float(*stage)[kLdStage] = t.stage[Warp()];
  const int ib = Warp() / 2, r = Lane() / 2, c0 = 8 * (Lane() % 2), i = kF * ib + r;
  for (int f = 0; f < 2; ++f) {
    const int jb = 2 * (Warp() % 2) + f;
    if (jb > ib) continue;
    wmma::store_matrix_sync(&stage[0][0], g[f], kLdStage, wmma::mem_row_major);
    __syncwarp();
    __align__(16) bf16 v[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int j = kF * jb + c0 + q;
      v[q] = __float2bfloat16_rn(j <= i ? stage[r][c0 + q] * expf(t.cum[i] - t.cum[j]) * t.dt[j]
                                        : 0.0f);
    }
    Store8(v, 8, &t.m[i][kF * jb + c0]);
    __syncwarp();
  }
}

// B_j <- weight_j B_j and, with outputs, C_i <- growth_i C_i, in place.
template <bool kOutputs>
__device__ void DecayOperands(Tiles& t) {
  constexpr int kGroups = kN / 8;
  for (int e = threadIdx.x; e < kQ * kGroups; e += kBlockThreads) {
    const int j = e / kGroups, k = 8 * (e % kGroups);
    const float w = t.weight[j], g = t.growth[j];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      t.b[j][k + q] = __float2bfloat16_rn(__bfloat162float(t.b[j][k + q]) * w);
      if constexpr (kOutputs)
        t.c[j][k + q] = __float2bfloat16_rn(__bfloat162float(t.c[j][k + q]) * g);
    }
  }
}

// Warp w's two fragments of y: row block w % 4, column blocks 2 (w / 4) + f;
// M X over the blocks on and below the diagonal, then C S^T.
__device__ void OutputProducts(const Tiles& t, int ptiles, int ntiles, FragC (&y)[2]) {
  const int ib = Warp() % 4;
  for (int f = 0; f < 2; ++f) {
    const int pb = 2 * (Warp() / 4) + f;
    wmma::fill_fragment(y[f], 0.0f);
    if (pb >= ptiles) continue;
    for (int kb = 0; kb <= ib; ++kb) {
      FragA m;
      FragB x;
      wmma::load_matrix_sync(m, &t.m[kF * ib][kF * kb], kLdM);
      wmma::load_matrix_sync(x, &t.x[kF * kb][kF * pb], kLdX);
      wmma::mma_sync(y[f], m, x, y[f]);
    }
    for (int kn = 0; kn < ntiles; ++kn) {
      FragA c;
      FragBT st;
      wmma::load_matrix_sync(c, &t.c[kF * ib][kF * kn], kLdB);
      wmma::load_matrix_sync(st, &t.s[kF * pb][kF * kn], kLdB);
      wmma::mma_sync(y[f], c, st, y[f]);
    }
  }
}

// y = the warp's fragments + D x, as bf16, rows below n and channels below P.
__device__ void StoreOutputs(const ScanArgs& a, int h, int64_t t0, int n, Tiles& t,
                             const FragC (&y)[2]) {
  const int P = a.p.head_dim, ptiles = Tiles16(P);
  const float skip = a.p.d_skip != nullptr ? a.p.d_skip[h] : 0.0f;
  float(*stage)[kLdStage] = t.stage[Warp()];
  const int ib = Warp() % 4, r = Lane() / 2, c0 = 8 * (Lane() % 2), i = kF * ib + r;
  for (int f = 0; f < 2; ++f) {
    const int pb = 2 * (Warp() / 4) + f, p0 = kF * pb + c0;
    if (pb >= ptiles) continue;
    wmma::store_matrix_sync(&stage[0][0], y[f], kLdStage, wmma::mem_row_major);
    __syncwarp();
    if (i < n) {
      __align__(16) bf16 v[8];
#pragma unroll
      for (int q = 0; q < 8; ++q)
        v[q] = __float2bfloat16_rn(stage[r][c0 + q] + skip * __bfloat162float(t.x[i][p0 + q]));
      Store8(v, P - p0, a.p.y + (t0 + i) * a.p.ldy + int64_t{h} * P + p0);
    }
    __syncwarp();
  }
}

// S <- exp(cum_last) S + X^T B (B already weighted) for the warp's state
// fragments, over the chunk's first `ktiles` blocks of 16 tokens.
__device__ void UpdateState(const Tiles& t, int ptiles, int ntiles, int ktiles, float decay,
                            FragC (&state)[kStateFrags]) {
  const int pb = Warp() / 2;
  for (int f = 0; f < kStateFrags; ++f) {
    const int nb = 4 * (Warp() % 2) + f;
    if (pb >= ptiles || nb >= ntiles) continue;
    for (int e = 0; e < state[f].num_elements; ++e) state[f].x[e] *= decay;
    for (int kb = 0; kb < ktiles; ++kb) {
      FragAT xt;
      FragB b;
      wmma::load_matrix_sync(xt, &t.x[kF * kb][kF * pb], kLdX);
      wmma::load_matrix_sync(b, &t.b[kF * kb][kF * nb], kLdB);
      wmma::mma_sync(state[f], xt, b, state[f]);
    }
  }
}

// One chunk of n tokens from t0; returns its log decay cum_last.
template <bool kOutputs>
__device__ float ScanChunk(const ScanArgs& a, int h, int64_t t0, int n, float decay_rate, Tiles& t,
                           FragC (&state)[kStateFrags]) {
  const int ptiles = Tiles16(a.p.head_dim), ntiles = Tiles16(a.p.d_state);
  LoadChunk<kOutputs>(a, h, t0, n, t);
  if constexpr (kOutputs) StateToBf16(state, ptiles, ntiles, t);
  __syncthreads();
  if (Warp() == 0) ChunkDecays(decay_rate, t);
  FragC g[2];
  if constexpr (kOutputs) GramProducts(t, ntiles, g);
  __syncthreads();  // cum and the weights are out; G has read B and C
  const float total = t.cum[kQ - 1];
  if constexpr (kOutputs) MixingWeights(g, t);
  DecayOperands<kOutputs>(t);
  __syncthreads();
  if constexpr (kOutputs) {
    FragC y[2];
    OutputProducts(t, ptiles, ntiles, y);
    StoreOutputs(a, h, t0, n, t, y);
  }
  UpdateState(t, ptiles, ntiles, Tiles16(n), expf(total), state);
  __syncthreads();  // every read of this chunk's tiles is done before the next loads
  return total;
}

// Block (segment, head) = (blockIdx.x / H, blockIdx.x % H). Without outputs:
// the segment from zero, its state and log decay into its slots. With: the
// segment from its carry-in slot, y out.
template <bool kOutputs>
__global__ void __launch_bounds__(kBlockThreads, 2) SegmentScanKernel(ScanArgs a) {
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  Tiles& t = *reinterpret_cast<Tiles*>(shared_bytes);
  const int H = a.p.heads, h = static_cast<int>(blockIdx.x % H);
  const int64_t segment = blockIdx.x / H;
  const int64_t chunks = (a.p.tokens + kQ - 1) / kQ;
  const int64_t first = segment * a.segment_chunks;
  const int64_t last = min(first + a.segment_chunks, chunks);
  float* slot = a.states + (segment * H + h) * int64_t{a.p.d_state} * a.p.head_dim;
  const float decay_rate = -expf(a.p.a_log[h]);
  FragC state[kStateFrags];
  LoadState(kOutputs ? slot : nullptr, a.p.head_dim, a.p.d_state, t, state);
  float log_decay = 0.0f;
  for (int64_t chunk = first; chunk < last; ++chunk) {
    const int64_t t0 = chunk * kQ;
    const int n = static_cast<int>(min(static_cast<int64_t>(kQ), a.p.tokens - t0));
    log_decay += ScanChunk<kOutputs>(a, h, t0, n, decay_rate, t, state);
  }
  if constexpr (!kOutputs) {
    StoreState(state, a.p.head_dim, a.p.d_state, t, slot);
    if (threadIdx.x == 0) a.decay[segment * H + h] = log_decay;
  }
}

absl::Status Validate(const SsdScanBf16Params& p, const float* state) {
  if (p.heads < 1 || p.heads > 65535 || p.head_dim < 1 || p.head_dim > kSsdBf16MaxHeadDim ||
      p.d_state < 1 || p.d_state > kSsdBf16MaxState || p.segment_chunks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SsdScanBf16: need 1 <= heads <= 65535, 1 <= head_dim <= ", kSsdBf16MaxHeadDim,
        ", 1 <= d_state <= ", kSsdBf16MaxState, " and segment_chunks >= 0; got heads ", p.heads,
        ", head_dim ", p.head_dim, ", d_state ", p.d_state, ", segment_chunks ", p.segment_chunks));
  }
  if (p.x == nullptr || p.b == nullptr || p.dt == nullptr || p.a_log == nullptr ||
      state == nullptr || (p.y != nullptr && p.c == nullptr)) {
    return absl::InvalidArgumentError(
        "SsdScanBf16: x, b, dt, a_log, state (and c when y is given) must not be null");
  }
  const int64_t width = int64_t{p.heads} * p.head_dim;
  if (std::abs(p.ldx) < width || std::abs(p.ldb) < p.d_state || std::abs(p.lddt) < p.heads ||
      (p.y != nullptr && (std::abs(p.ldc) < p.d_state || std::abs(p.ldy) < width))) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdScanBf16: row strides too small in magnitude: ldx ", p.ldx, ", ldb ",
                     p.ldb, ", ldc ", p.ldc, ", lddt ", p.lddt, ", ldy ", p.ldy,
                     " for heads * head_dim = ", width, ", d_state ", p.d_state));
  }
  return absl::OkStatus();
}

absl::Status LaunchSegments(cudaStream_t s, const ScanArgs& args, unsigned blocks, bool outputs) {
  auto* const kernel = outputs ? SegmentScanKernel<true> : SegmentScanKernel<false>;
  LACT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 kTilesBytes));
  kernel<<<blocks, kBlockThreads, kTilesBytes, s>>>(args);
  // bf16 x and B (and C, y) and fp32 dt of every token; fp32 segment states
  // out, or carry-in states in.
  const SsdScanBf16Params& p = args.p;
  const int64_t width = int64_t{p.heads} * p.head_dim;
  const int64_t states = int64_t{blocks} * (p.head_dim * p.d_state + 1);
  NoteLaunch(outputs ? "SsdScanBf16 outputs" : "SsdScanBf16 segment states",
             p.tokens * (2 * width + 2 * (outputs ? 2 : 1) * p.d_state + 4 * p.heads) +
                 (outputs ? 4 * states : 0),
             outputs ? 2 * p.tokens * width : 4 * states);
  return LaunchStatus(outputs ? "SsdScanBf16 outputs" : "SsdScanBf16 segment states");
}

}  // namespace

absl::Status SsdScanBf16(cudaStream_t s, SsdWorkspace& ws, const SsdScanBf16Params& p, float* state,
                         float* log_decay) {
  if (p.tokens < 0)
    return absl::InvalidArgumentError(absl::StrCat("SsdScanBf16: tokens ", p.tokens, " < 0"));
  if (p.tokens == 0) return absl::OkStatus();
  LACT_RETURN_IF_ERROR(Validate(p, state));
  const int64_t chunks = CeilDiv(p.tokens, kQ);
  int64_t per_segment = p.segment_chunks;
  if (per_segment == 0) {
    LACT_ASSIGN_OR_RETURN(const int sms, MultiprocessorCount());
    per_segment =
        CeilDiv(chunks, std::clamp<int64_t>(CeilDiv(2 * int64_t{sms}, p.heads), 1, chunks));
  }
  const int64_t segments = CeilDiv(chunks, per_segment);
  if (segments * p.heads > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("SsdScanBf16: ", segments, " segments of ",
                                                   p.heads, " heads do not fit one launch"));
  }
  const int64_t per_state = int64_t{p.heads} * p.head_dim * p.d_state;
  LACT_ASSIGN_OR_RETURN(float* scratch, ws.Reserve(s, segments * (per_state + p.heads)));
  const ScanArgs args{p, per_segment, scratch, scratch + segments * per_state};
  const auto blocks = static_cast<unsigned>(segments * p.heads);
  LACT_RETURN_IF_ERROR(LaunchSegments(s, args, blocks, /*outputs=*/false));
  LACT_RETURN_IF_ERROR(PassSegmentStates(s, p.heads, p.head_dim, p.d_state,
                                         SegmentStates{segments, args.states, args.decay},
                                         /*write_carry=*/p.y != nullptr, state, log_decay));
  if (p.y == nullptr) return absl::OkStatus();
  return LaunchSegments(s, args, blocks, /*outputs=*/true);
}

}  // namespace lact::cuda
