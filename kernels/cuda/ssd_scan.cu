// The chunked (SSD) selective scan. Per head h, with a = A[h] = -exp(a_log[h])
// and, inside a chunk of Q = 64 tokens, cum_i = sum_{k<=i} dt_k a (so every
// exp below is of a non-positive number):
//   y_i = sum_{j<=i} (C_i . B_j) exp(cum_i - cum_j) dt_j x_j     intra-chunk
//       + exp(cum_i) C_i @ S_in^T                                carry-in state
//       + D x_i
//   S_out = exp(cum_last) S_in + sum_j exp(cum_last - cum_j) dt_j x_j B_j^T
// Three kernels per window of chunks, all on the caller's stream:
//   ChunkState   per chunk:         G = C B^T (shared by all heads)
//                per (segment, h):  the state a segment of chunks reaches
//                                   from zero, and its log decay
//   PassStates   per h, over P*N:   walks the segments in order from the
//                                   incoming state: each segment's slot gets
//                                   the state entering it; final state out
//                                   (PassSegmentStates, ssd_pass_states.h)
//   ChunkOutput  per (chunk, h):    y from G, x and the carry-in state
// With outputs a segment is one chunk; the state-only pass computes no G, has
// no ChunkOutput and uses segments of many chunks, so its scratch stays small.
// The matrix products run through one tiled block GEMM (BlockGemm) whose
// operands are produced element by element by the caller, which lets each
// kernel fold masks and decays into the operand loads. Its products run on
// fp32 cores (SsdMath::kFp32) or on the tensor cores as 3xTF32
// (SsdMath::kTf32x3: each operand split into a tf32 head and the tf32 of
// the remainder; head*head + head*tail + tail*head keeps about fp32's
// accuracy), with the same tiles either way.
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ssd_pass_states.h"
#include "kernels/cuda/ssd_scan.h"
#include "kernels/cuda/traffic.h"

namespace lact::cuda {
namespace {

constexpr int kChunk = 64;  // tokens per chunk (Q)
// BlockGemm: a kTile x kTile output per block, kDepth of the reduction per
// step, kTm x kTn outputs per thread.
constexpr int kTile = 64;
constexpr int kDepth = 16;
constexpr int kTm = 8;
constexpr int kTn = 4;
constexpr int kGemmThreads = (kTile / kTm) * (kTile / kTn);
constexpr int kPad =
    4;  // keeps tile rows 16-byte aligned, halves bank conflicts of transposed stores
constexpr int kPerThread =
    kDepth * kTile / kGemmThreads;  // tile elements each thread loads per step
static_assert(kChunk == kTile, "a chunk's tokens are one tile of rows");
static_assert(kChunk % kDepth == 0, "no reduction step straddles the intra-chunk and carry parts");
static_assert(kTm == 8 && kTn == 4,
              "the inner loop reads two float4 of A and one of B; a row of outputs is one float4");
static_assert(kDepth * kTile % kGemmThreads == 0 && kGemmThreads >= 32, "tile loads and warp 0");

// Scratch sizing: the scan with outputs goes in windows of about kWindowFloats
// floats of scratch (small enough to stay largely in L2 between the kernels of
// a window); the state-only pass makes about kBlocksPerSm segment blocks per SM.
constexpr int64_t kWindowFloats = int64_t{8} << 20;
constexpr int64_t kMinWindowChunks = 16;
constexpr int64_t kMaxWindowChunks = 4096;
constexpr int64_t kBlocksPerSm = 16;

// The kernels' arguments: the caller's, and how BlockGemm multiplies.
struct ScanArgs : SsdScanParams {
  bool tensor_cores;  // BlockGemm's products as 3xTF32 (SsdMath::kTf32x3)
};

// Tokens [start, end) scanned by one round of kernels, cut into `segments`
// segments of `chunks_per_segment` chunks (the last one may be shorter), and
// the scratch of that round.
struct Window {
  int64_t start, end;
  int64_t segments, chunks_per_segment;
  float* states;  // [segments][H][N][P]: a segment's state, transposed (S^T)
  float* decay;   // [segments][H]: a segment's log decay
  float* gram;    // [chunks][kChunk][kChunk]: G = C B^T of each chunk (outputs only)
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ inline int64_t WindowChunks(const Window& w) {
  return (w.end - w.start + kChunk - 1) / kChunk;
}

__device__ inline int ChunkTokens(const Window& w, int64_t t0) {
  return static_cast<int>(min(static_cast<int64_t>(kChunk), w.end - t0));
}

// Warp 0 of a block (threadIdx.x < 32), for the n tokens of a chunk at `dt`
// (row stride lddt): dts[i] = dt_i and cum[i] = sum_{k<=i} dt_k a, with
// dt = 0 past n. The sum runs in token order, as on the CPU: the kernels use
// differences cum_i - cum_j of nearby tokens, whose rounding error is then
// one rounding per token between them (a tree scan would give each cum_i
// its own few roundings at the scale of |cum|, which reaches hundreds).
__device__ void ChunkDecay(const float* dt, int64_t lddt, int n, float a, float* dts, float* cum) {
  for (int i = threadIdx.x; i < kChunk; i += 32) dts[i] = i < n ? dt[i * lddt] : 0.0f;
  __syncwarp();
  if (threadIdx.x == 0) {
    float run = 0.0f;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      run += dts[i] * a;
      cum[i] = run;
    }
  }
  __syncwarp();
}

// The block GEMM: shared tiles of the two operands for one reduction step,
// 256-bit aligned, as wmma loads need.
struct GemmTiles {
  __align__(32) float a[kDepth][kTile + kPad];  // a[k][m] = A[m][k]
  __align__(32) float b[kDepth][kTile + kPad];  // b[k][n] = B[k][n]
};

// p[0, 4) as one 16-byte access where p is 16-byte aligned and all four
// are in range (count >= 4); else element by element, those below count.
// The epilogues' rows then go out as whole sectors: with four scalar
// accesses each warp instruction touches every sector of its rows for a
// quarter of their bytes.
__device__ inline void Load4(const float* p, int count, float (&v)[4]) {
  if (count >= 4 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = q < count ? p[q] : 0.0f;
}

__device__ inline void Store4(float* p, int count, const float (&v)[4]) {
  if (count >= 4 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    *reinterpret_cast<float4*>(p) = float4{v[0], v[1], v[2], v[3]};
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (q < count) p[q] = v[q];
  }
}

// First output row and column of this thread's kTm x kTn block of outputs.
__device__ inline int TileRow0() { return threadIdx.x / (kTile / kTn) * kTm; }
__device__ inline int TileCol0() { return threadIdx.x % (kTile / kTn) * kTn; }

// The (k, m) tile element that this thread loads as its r-th. kKFastest:
// consecutive threads take consecutive k (for operands contiguous along k in
// memory), else consecutive m.
template <bool kKFastest>
__device__ inline void TileElement(int r, int& k, int& m) {
  const int e = threadIdx.x + r * kGemmThreads;
  if constexpr (kKFastest) {
    k = e % kDepth;
    m = e / kDepth;
  } else {
    k = e / kTile;
    m = e % kTile;
  }
}

template <bool kKFastest, class Fetch>
__device__ inline void FetchTile(int k0, const Fetch& fetch, float (&v)[kPerThread]) {
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    int k, m;
    TileElement<kKFastest>(r, k, m);
    v[r] = fetch(k0 + k, m);
  }
}

template <bool kKFastest>
__device__ inline void StoreTile(const float (&v)[kPerThread],
                                 float (&tile)[kDepth][kTile + kPad]) {
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    int k, m;
    TileElement<kKFastest>(r, k, m);
    tile[k][m] = v[r];
  }
}

// The reduction steps of a block GEMM over `depth`: each stores a step's
// kDepth-deep operand tiles in shared memory and runs `step` on them, while
// the next step's operands are fetched into registers.
template <bool kAKFastest, bool kBKFastest, class FetchA, class FetchB, class Step>
__device__ void ForEachStep(int depth, const FetchA& fetch_a, const FetchB& fetch_b,
                            GemmTiles& tiles, const Step& step) {
  float next_a[kPerThread], next_b[kPerThread];
  FetchTile<kAKFastest>(0, fetch_a, next_a);
  FetchTile<kBKFastest>(0, fetch_b, next_b);
  for (int k0 = 0; k0 < depth; k0 += kDepth) {
    __syncthreads();  // every thread is done with the previous step's tiles
    StoreTile<kAKFastest>(next_a, tiles.a);
    StoreTile<kBKFastest>(next_b, tiles.b);
    __syncthreads();
    if (k0 + kDepth < depth) {
      FetchTile<kAKFastest>(k0 + kDepth, fetch_a, next_a);
      FetchTile<kBKFastest>(k0 + kDepth, fetch_b, next_b);
    }
    step();
  }
}

// acc[r][q] += sum_{k < depth} A[row0 + r][k] B[k][col0 + q] over the block's
// kTile x kTile output, where fetch_a(k, m) = A[m][k] and fetch_b(k, n) =
// B[k][n], zero outside the operands (including k >= depth, up to the next
// multiple of kDepth). The next step's operands are fetched into registers
// while the current step computes. Every thread of the block must call it;
// shared memory that the fetches read must be written, and a __syncthreads
// passed, before the call.
template <bool kAKFastest, bool kBKFastest, class FetchA, class FetchB>
__device__ void BlockGemmFp32(int depth, const FetchA& fetch_a, const FetchB& fetch_b,
                              GemmTiles& tiles, float (&acc)[kTm][kTn]) {
  const int row0 = TileRow0(), col0 = TileCol0();
  ForEachStep<kAKFastest, kBKFastest>(depth, fetch_a, fetch_b, tiles, [&] {
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&tiles.a[kk][row0]);
      const float4 a1 = *reinterpret_cast<const float4*>(&tiles.a[kk][row0 + 4]);
      const float4 bv = *reinterpret_cast<const float4*>(&tiles.b[kk][col0]);
      const float a[kTm] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[kTn] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
      for (int r = 0; r < kTm; ++r) {
#pragma unroll
        for (int q = 0; q < kTn; ++q) acc[r][q] = fmaf(a[r], b[q], acc[r][q]);
      }
    }
  });
}

namespace wmma = nvcuda::wmma;
using TileA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using TileB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using TileC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;
static_assert(kGemmThreads / 32 == kTile / 16, "one warp per 16 rows of the output tile");
static_assert(kDepth % 8 == 0, "tf32 products reduce 8 deep");

struct ProductTile {
  __align__(32) float v[kTile][kTile + kPad];
};

// head <- tf32(v), tail <- tf32(v - head), for each of the fragment's values.
template <class Frag>
__device__ inline void SplitTf32(Frag& head, Frag& tail) {
#pragma unroll
  for (int i = 0; i < head.num_elements; ++i) {
    const float v = head.x[i];
    head.x[i] = wmma::__float_to_tf32(v);
    tail.x[i] = wmma::__float_to_tf32(v - head.x[i]);
  }
}

// BlockGemmFp32's contract on the tensor cores: warp w makes output rows
// [16w, 16w + 16) as four 16x16 fragments, 3xTF32; at the end the product
// goes through shared memory and each thread adds its kTm x kTn block.
template <bool kAKFastest, bool kBKFastest, class FetchA, class FetchB>
__device__ void BlockGemmTf32x3(int depth, const FetchA& fetch_a, const FetchB& fetch_b,
                                GemmTiles& tiles, float (&acc)[kTm][kTn]) {
  // The product on its way from the warps' fragments to each thread's outputs.
  __shared__ ProductTile product;
  const int warp = threadIdx.x / 32;
  constexpr unsigned kLd = kTile + kPad;
  TileC out[kTile / 16];
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) wmma::fill_fragment(out[j], 0.0f);
  ForEachStep<kAKFastest, kBKFastest>(depth, fetch_a, fetch_b, tiles, [&] {
#pragma unroll
    for (int kk = 0; kk < kDepth; kk += 8) {
      TileA a_head, a_tail;
      wmma::load_matrix_sync(a_head, &tiles.a[kk][16 * warp], kLd);
      SplitTf32(a_head, a_tail);
#pragma unroll
      for (int j = 0; j < kTile / 16; ++j) {
        TileB b_head, b_tail;
        wmma::load_matrix_sync(b_head, &tiles.b[kk][16 * j], kLd);
        SplitTf32(b_head, b_tail);
        wmma::mma_sync(out[j], a_tail, b_head, out[j]);
        wmma::mma_sync(out[j], a_head, b_tail, out[j]);
        wmma::mma_sync(out[j], a_head, b_head, out[j]);
      }
    }
  });
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    wmma::store_matrix_sync(&product.v[16 * warp][16 * j], out[j], kLd, wmma::mem_row_major);
  }
  __syncthreads();
  const int row0 = TileRow0(), col0 = TileCol0();
  for (int r = 0; r < kTm; ++r) {
    for (int q = 0; q < kTn; ++q) acc[r][q] += product.v[row0 + r][col0 + q];
  }
  __syncthreads();  // the product is read before the next call rewrites it
}

// Each kernel is instantiated for both: kTensorCores picks the products.
template <bool kTensorCores, bool kAKFastest, bool kBKFastest, class FetchA, class FetchB>
__device__ void BlockGemm(int depth, const FetchA& fetch_a, const FetchB& fetch_b, GemmTiles& tiles,
                          float (&acc)[kTm][kTn]) {
  if constexpr (kTensorCores) {
    BlockGemmTf32x3<kAKFastest, kBKFastest>(depth, fetch_a, fetch_b, tiles, acc);
  } else {
    BlockGemmFp32<kAKFastest, kBKFastest>(depth, fetch_a, fetch_b, tiles, acc);
  }
}

// G[i][j] = C_i . B_j for the tokens i, j of one chunk (zero past its end).
template <bool kTensorCores>
__device__ void ChunkGram(const ScanArgs& args, const Window& w, int64_t chunk, GemmTiles& tiles) {
  const int64_t t0 = w.start + chunk * kChunk;
  const int n = ChunkTokens(w, t0), N = args.d_state;
  const int64_t ldb = args.ldb, ldc = args.ldc;
  const float* c_rows = args.c + t0 * ldc;
  const float* b_rows = args.b + t0 * ldb;
  float acc[kTm][kTn] = {};
  BlockGemm<kTensorCores, true, true>(
      N, [&](int k, int i) { return i < n && k < N ? c_rows[i * ldc + k] : 0.0f; },
      [&](int k, int j) { return j < n && k < N ? b_rows[j * ldb + k] : 0.0f; }, tiles, acc);
  float* gram = w.gram + chunk * kChunk * kChunk;
  const int row0 = TileRow0(), col0 = TileCol0();
  for (int r = 0; r < kTm; ++r) Store4(gram + (row0 + r) * kChunk + col0, kTn, acc[r]);
}

// The state that one segment of chunks reaches from zero, for one head and
// one kTile x kTile tile of S^T (rows n, columns p), and the segment's log
// decay. Per chunk: S <- exp(cum_last) S + sum_j w_j B_j x_j^T (as S^T) with
// w_j = exp(cum_last - cum_j) dt_j. `index` enumerates segment x head x
// N tiles x P tiles.
template <bool kTensorCores>
__device__ void SegmentState(const ScanArgs& args, const Window& w, int64_t index,
                             GemmTiles& tiles) {
  __shared__ float dts[kChunk], cum[kChunk], weight[kChunk];
  const int P = args.head_dim, N = args.d_state, H = args.heads;
  const int ptiles = (P + kTile - 1) / kTile, ntiles = (N + kTile - 1) / kTile;
  const int ptile = static_cast<int>(index % ptiles);
  index /= ptiles;
  const int ntile = static_cast<int>(index % ntiles);
  index /= ntiles;
  const int h = static_cast<int>(index % H);
  const int64_t segment = index / H;
  const int p0 = ptile * kTile, n0 = ntile * kTile;
  const int64_t ldb = args.ldb, ldx = args.ldx;
  const float a = -expf(args.a_log[h]);
  const int64_t first = segment * w.chunks_per_segment;
  const int64_t last = min(first + w.chunks_per_segment, WindowChunks(w));
  float acc[kTm][kTn] = {};
  float log_decay = 0.0f;
  for (int64_t chunk = first; chunk < last; ++chunk) {
    const int64_t t0 = w.start + chunk * kChunk;
    const int n = ChunkTokens(w, t0);
    __syncthreads();  // the previous chunk's weights are consumed
    if (threadIdx.x < 32) {
      ChunkDecay(args.dt + t0 * args.lddt + h, args.lddt, n, a, dts, cum);
      const float total = cum[n - 1];
      for (int i = threadIdx.x; i < kChunk; i += 32) weight[i] = expf(total - cum[i]) * dts[i];
    }
    __syncthreads();
    const float chunk_log_decay = cum[n - 1];
    log_decay += chunk_log_decay;
    const float decay = expf(chunk_log_decay);
    for (int r = 0; r < kTm; ++r) {
      for (int q = 0; q < kTn; ++q) acc[r][q] *= decay;
    }
    const float* b_rows = args.b + t0 * ldb;
    const float* x_rows = args.x + t0 * ldx + static_cast<int64_t>(h) * P;
    BlockGemm<kTensorCores, false, false>(
        kChunk,
        [&](int j, int m) {
          const int row = n0 + m;
          return j < n && row < N ? b_rows[j * ldb + row] : 0.0f;
        },
        [&](int j, int col) {
          const int p = p0 + col;
          return j < n && p < P ? weight[j] * x_rows[j * ldx + p] : 0.0f;
        },
        tiles, acc);
  }
  float* out = w.states + (segment * H + h) * static_cast<int64_t>(N) * P;
  const int row0 = TileRow0(), p = p0 + TileCol0();
  for (int r = 0; r < kTm; ++r) {
    const int row = n0 + row0 + r;
    if (row < N) Store4(out + static_cast<int64_t>(row) * P + p, P - p, acc[r]);
  }
  if (threadIdx.x == 0 && ptile == 0 && ntile == 0) w.decay[segment * H + h] = log_decay;
}

// The window's chunk Gram matrices (when w.gram is set, i.e. with outputs;
// one block per chunk, first) and segment states (the other blocks), in one
// launch so that the few Gram blocks run beside the many state blocks.
template <bool kTensorCores>
__global__ void __launch_bounds__(kGemmThreads, 4) ChunkStateKernel(ScanArgs args, Window w) {
  __shared__ GemmTiles tiles;
  const int64_t gram_blocks = w.gram != nullptr ? WindowChunks(w) : 0;
  if (blockIdx.x < gram_blocks) {
    ChunkGram<kTensorCores>(args, w, blockIdx.x, tiles);
  } else {
    SegmentState<kTensorCores>(args, w, blockIdx.x - gram_blocks, tiles);
  }
}

// y for one chunk, head h and kTile channels, as one product over depth
// kChunk + N: A = [M | diag(exp(cum)) C] with M[i][j] = G[i][j]
// exp(cum_i - cum_j) dt_j for j <= i, against B = [X ; S_in^T]; then + D x.
// Grid: chunk x head x P tiles.
template <bool kTensorCores>
__global__ void __launch_bounds__(kGemmThreads, 4) ChunkOutputKernel(ScanArgs args, Window w) {
  __shared__ GemmTiles tiles;
  __shared__ float dts[kChunk], cum[kChunk], growth[kChunk];
  const int P = args.head_dim, N = args.d_state, H = args.heads;
  const int ptiles = (P + kTile - 1) / kTile;
  int64_t index = blockIdx.x;
  const int ptile = static_cast<int>(index % ptiles);
  index /= ptiles;
  const int h = static_cast<int>(index % H);
  const int64_t chunk = index / H;
  const int p0 = ptile * kTile;
  const int64_t t0 = w.start + chunk * kChunk;
  const int n = ChunkTokens(w, t0);
  const int64_t ldc = args.ldc, ldx = args.ldx;
  if (threadIdx.x < 32) {
    ChunkDecay(args.dt + t0 * args.lddt + h, args.lddt, n, -expf(args.a_log[h]), dts, cum);
    for (int i = threadIdx.x; i < kChunk; i += 32) growth[i] = expf(cum[i]);
  }
  __syncthreads();
  const float* gram = w.gram + chunk * kChunk * kChunk;
  const float* c_rows = args.c + t0 * ldc;
  const float* x_rows = args.x + t0 * ldx + static_cast<int64_t>(h) * P;
  const float* carry = w.states + (chunk * H + h) * static_cast<int64_t>(N) * P;  // S_in^T [N][P]
  float acc[kTm][kTn] = {};
  BlockGemm<kTensorCores, true, false>(
      kChunk + N,
      [&](int k, int i) {
        if (i >= n) return 0.0f;
        if (k < kChunk)
          return k <= i ? gram[i * kChunk + k] * expf(cum[i] - cum[k]) * dts[k] : 0.0f;
        return k - kChunk < N ? growth[i] * c_rows[i * ldc + (k - kChunk)] : 0.0f;
      },
      [&](int k, int col) {
        const int p = p0 + col;
        if (p >= P) return 0.0f;
        if (k < kChunk) return k < n ? x_rows[k * ldx + p] : 0.0f;
        return k - kChunk < N ? carry[static_cast<int64_t>(k - kChunk) * P + p] : 0.0f;
      },
      tiles, acc);
  const float skip = args.d_skip != nullptr ? args.d_skip[h] : 0.0f;
  float* y_rows = args.y + t0 * args.ldy + static_cast<int64_t>(h) * P;
  const int row0 = TileRow0(), p = p0 + TileCol0();
  for (int r = 0; r < kTm; ++r) {
    const int i = row0 + r;
    if (i >= n) break;
    float x[kTn];
    Load4(x_rows + i * ldx + p, P - p, x);
    for (int q = 0; q < kTn; ++q) x[q] = acc[r][q] + skip * x[q];
    Store4(y_rows + i * args.ldy + p, P - p, x);
  }
}

absl::Status Validate(const ScanArgs& a, const float* state) {
  if (a.heads < 1 || a.heads > 65535 || a.head_dim < 1 || a.d_state < 1 ||
      int64_t{a.head_dim} * a.d_state > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdScan: need 1 <= heads <= 65535, head_dim >= 1, d_state >= 1 ",
                     "and head_dim * d_state <= 2^30; got heads ", a.heads, ", head_dim ",
                     a.head_dim, ", d_state ", a.d_state));
  }
  if (a.x == nullptr || a.b == nullptr || a.dt == nullptr || a.a_log == nullptr ||
      state == nullptr || (a.y != nullptr && a.c == nullptr)) {
    return absl::InvalidArgumentError(
        "SsdScan: x, b, dt, a_log, state (and c when y is given) must not be null");
  }
  const int64_t width = int64_t{a.heads} * a.head_dim;
  if (std::abs(a.ldx) < width || std::abs(a.ldb) < a.d_state || std::abs(a.lddt) < a.heads ||
      (a.y != nullptr && (std::abs(a.ldc) < a.d_state || std::abs(a.ldy) < width))) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdScan: row strides too small in magnitude: ldx ", a.ldx, ", ldb ", a.ldb,
                     ", ldc ", a.ldc, ", lddt ", a.lddt, ", ldy ", a.ldy,
                     " for heads * head_dim = ", width, ", d_state ", a.d_state));
  }
  return absl::OkStatus();
}

absl::StatusOr<unsigned> GridSize(int64_t blocks) {
  if (blocks < 1 || blocks > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdScan: ", blocks, " blocks do not fit one launch"));
  }
  return static_cast<unsigned>(blocks);
}

int64_t TilesOf(int size) { return CeilDiv(size, kTile); }

// ChunkStateKernel over the window: Gram matrices when w.gram is set, then
// segment states.
absl::Status LaunchChunkStates(cudaStream_t s, const ScanArgs& args, const Window& w,
                               int64_t chunks) {
  const int64_t gram_blocks = w.gram != nullptr ? chunks : 0;
  LACT_ASSIGN_OR_RETURN(const unsigned blocks,
                        GridSize(gram_blocks + w.segments * args.heads * TilesOf(args.d_state) *
                                                   TilesOf(args.head_dim)));
  auto* const kernel = args.tensor_cores ? ChunkStateKernel<true> : ChunkStateKernel<false>;
  kernel<<<blocks, kGemmThreads, 0, s>>>(args, w);
  // x, B and dt of the window's tokens (and C for the Gram matrices) in;
  // the segment states and decays (and the Gram matrices) out.
  const int64_t tokens = w.end - w.start, gram = w.gram != nullptr ? 1 : 0;
  const int64_t per_state = int64_t{args.heads} * args.head_dim * args.d_state;
  NoteLaunch("SsdScan chunk states",
             4 * tokens * (int64_t{args.heads} * (args.head_dim + 1) + (1 + gram) * args.d_state),
             4 * (w.segments * (per_state + args.heads) + gram * chunks * kChunk * kChunk));
  return LaunchStatus("SsdScan chunk states");
}

absl::Status LaunchPassStates(cudaStream_t s, const ScanArgs& args, const Window& w,
                              bool write_carry, float* state, float* log_decay) {
  return PassSegmentStates(s, args.heads, args.head_dim, args.d_state,
                           SegmentStates{w.segments, w.states, w.decay}, write_carry, state,
                           log_decay);
}

// The state-only pass: segments of many chunks, enough of them to fill the
// device, scanned from zero and then combined in order.
absl::Status ScanStateOnly(cudaStream_t s, SsdWorkspace& ws, const ScanArgs& args, float* state,
                           float* log_decay) {
  LACT_ASSIGN_OR_RETURN(const int sms, MultiprocessorCount());
  const int64_t chunks = CeilDiv(args.tokens, kChunk);
  const int64_t blocks_per_segment = args.heads * TilesOf(args.d_state) * TilesOf(args.head_dim);
  const int64_t wanted =
      std::clamp<int64_t>(CeilDiv(kBlocksPerSm * sms, blocks_per_segment), 1, chunks);
  const int64_t per_segment = CeilDiv(chunks, wanted);
  const int64_t segments = CeilDiv(chunks, per_segment);
  const int64_t per_state = int64_t{args.heads} * args.head_dim * args.d_state;
  LACT_ASSIGN_OR_RETURN(float* scratch, ws.Reserve(s, segments * (per_state + args.heads)));
  const Window w{
      0, args.tokens, segments, per_segment, scratch, scratch + segments * per_state, nullptr};
  LACT_RETURN_IF_ERROR(LaunchChunkStates(s, args, w, chunks));
  return LaunchPassStates(s, args, w, /*write_carry=*/false, state, log_decay);
}

// The scan with outputs, window by window; within a window every chunk is a
// segment, so PassStates leaves each chunk's carry-in state for ChunkOutput.
absl::Status ScanWithOutputs(cudaStream_t s, SsdWorkspace& ws, const ScanArgs& args, float* state,
                             float* log_decay) {
  const int64_t chunks = CeilDiv(args.tokens, kChunk);
  const int64_t per_state = int64_t{args.heads} * args.head_dim * args.d_state;
  const int64_t per_chunk = per_state + args.heads + kChunk * kChunk;
  int64_t window = ws.max_window_chunks() > 0
                       ? ws.max_window_chunks()
                       : std::clamp(kWindowFloats / per_chunk, kMinWindowChunks, kMaxWindowChunks);
  window = std::min(window, chunks);
  // The Gram matrices start on a 16-byte boundary, for ChunkGram's float4 stores.
  const int64_t gram_offset = (window * (per_state + args.heads) + 3) / 4 * 4;
  LACT_ASSIGN_OR_RETURN(float* scratch, ws.Reserve(s, gram_offset + window * kChunk * kChunk));
  float* decay = scratch + window * per_state;
  float* gram = scratch + gram_offset;
  const int64_t ptiles = TilesOf(args.head_dim);
  for (int64_t first = 0; first < chunks; first += window) {
    const int64_t count = std::min(window, chunks - first);
    const Window w{first * kChunk,
                   std::min(args.tokens, (first + count) * kChunk),
                   count,
                   1,
                   scratch,
                   decay,
                   gram};
    LACT_RETURN_IF_ERROR(LaunchChunkStates(s, args, w, count));
    LACT_RETURN_IF_ERROR(LaunchPassStates(s, args, w, /*write_carry=*/true, state, log_decay));
    LACT_ASSIGN_OR_RETURN(const unsigned out_blocks, GridSize(count * args.heads * ptiles));
    auto* const kernel = args.tensor_cores ? ChunkOutputKernel<true> : ChunkOutputKernel<false>;
    kernel<<<out_blocks, kGemmThreads, 0, s>>>(args, w);
    const int64_t n = w.end - w.start, width = int64_t{args.heads} * args.head_dim;
    NoteLaunch("SsdScan chunk outputs",
               4 * (n * (width + args.d_state + args.heads) +
                    count * (per_state + args.heads + kChunk * kChunk)),
               4 * n * width);
    LACT_RETURN_IF_ERROR(LaunchStatus("SsdScan chunk outputs"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SsdMath> ParseSsdMath(const std::string& name) {
  if (name == "fp32") return SsdMath::kFp32;
  if (name == "tf32x3") return SsdMath::kTf32x3;
  if (name == "bf16") return SsdMath::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scan math '", name, "' (allowed: fp32, tf32x3, bf16)"));
}

absl::Status SsdScan(cudaStream_t s, SsdWorkspace& ws, const SsdScanParams& p, float* state,
                     float* log_decay) {
  if (p.tokens < 0)
    return absl::InvalidArgumentError(absl::StrCat("SsdScan: tokens ", p.tokens, " < 0"));
  if (p.tokens == 0) return absl::OkStatus();
  const ScanArgs args{p, ws.math() == SsdMath::kTf32x3};
  LACT_RETURN_IF_ERROR(Validate(args, state));
  if (p.y == nullptr) return ScanStateOnly(s, ws, args, state, log_decay);
  return ScanWithOutputs(s, ws, args, state, log_decay);
}

}  // namespace lact::cuda
