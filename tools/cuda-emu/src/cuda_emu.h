// CPU emulation of the CUDA device features the lact .cu files use.
// Every block runs its threads as cooperative fibers (own asm context switch) on the launching OS
// thread; __syncthreads and
// __syncwarp are real barriers (a fiber yields until every live thread of the block / warp
// arrived), warp shuffles go through a per-warp exchange array between two warp barriers. Blocks
// run one after another;
// __shared__ = function statics (valid because launches are serialized by a global mutex and blocks
// run in sequence). A barrier that can never complete (divergent __syncthreads) aborts with a
// message. "Direct" launches (kernels without any barrier) run threads as plain calls; a barrier
// there aborts.
#pragma once
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "emu_counts.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Globals: one launch at a time in the process (g_emu_launch_mu).
inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

// Minimal x86-64 context switch (callee-saved registers + stack pointer): glibc's swapcontext makes
// a sigprocmask syscall per switch and ASan's interceptor clears the whole target stack's shadow
// each time.
extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.weak emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");

namespace emu {

inline std::mutex g_launch_mu;
constexpr size_t kStack = 256 * 1024;
constexpr int kMaxThreads = 1024;

struct Fiber {
  void* sp = nullptr;
  void* stack = nullptr;
  bool done = false;
  int wait = 0;  // 0 runnable, 1 block barrier, 2 warp barrier
  uint64_t gen = 0;
};

struct BlockState {
  int n = 0;
  bool direct = false;
  std::vector<Fiber> fibers;
  void* sched_sp = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
  int current = -1;
  int alive = 0, arrived = 0;
  uint64_t gen = 0;
  std::vector<int> warp_alive, warp_arrived;
  std::vector<uint64_t> warp_gen;
  std::vector<float> exchange;
  std::vector<float> mma_exchange;  // per warp, the operands of a wmma::mma_sync (mma.h)
  unsigned char* dynamic_shared =
      nullptr;  // the launch's dynamic shared memory, NaN at each block's start
  size_t dynamic_bytes = 0;
  const std::function<void()>* body = nullptr;
  const char* kernel_name = "";
};

// Floats per warp for the two operands of one mma_sync (16x16 tiles at most).
constexpr int kMmaExchange = 2 * 16 * 16;

inline BlockState& B() {
  static BlockState b;
  return b;
}

inline std::vector<void*>& Stacks() {
  static std::vector<void*> s;
  return s;
}

[[noreturn]] inline void Die(const char* what) {
  std::fprintf(stderr, "CUDA EMU VIOLATION in kernel %s block (%u,%u,%u) thread %u: %s\n",
               B().kernel_name, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, what);
  std::fflush(stderr);
  std::abort();
}

inline void YieldToScheduler() {
  BlockState& b = B();
  Fiber& f = b.fibers[b.current];
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, b.sched_bottom, b.sched_size);
#endif
  emu_switch(&f.sp, b.sched_sp);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, &b.sched_bottom, &b.sched_size);
#endif
}

inline void SyncThreads() {
  BlockState& b = B();
  if (b.direct) Die("__syncthreads in a kernel launched as barrier-free");
  ++b.arrived;
  if (b.arrived == b.alive) {
    b.arrived = 0;
    ++b.gen;
    return;
  }
  Fiber& f = b.fibers[b.current];
  f.wait = 1;
  f.gen = b.gen;
  YieldToScheduler();
}

inline void SyncWarp() {
  BlockState& b = B();
  if (b.direct) Die("__syncwarp/shuffle in a kernel launched as barrier-free");
  const int w = b.current / 32;
  ++b.warp_arrived[w];
  if (b.warp_arrived[w] == b.warp_alive[w]) {
    b.warp_arrived[w] = 0;
    ++b.warp_gen[w];
    return;
  }
  Fiber& f = b.fibers[b.current];
  f.wait = 2;
  f.gen = b.warp_gen[w];
  YieldToScheduler();
}

inline void Entry(int t) {
  BlockState& b = B();
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.sched_bottom, &b.sched_size);
#endif
  (*b.body)();
  Fiber& f = b.fibers[t];
  f.done = true;
  --b.alive;
  const int w = t / 32;
  --b.warp_alive[w];
  // A thread that exits while others wait at a barrier: on the GPU the barrier then counts only
  // live threads; report it since it is usually a bug (barrier in divergent code).
  if (b.arrived > 0 && b.arrived == b.alive) {
    std::fprintf(
        stderr,
        "CUDA EMU NOTE: kernel %s: thread %d exited while %d threads wait at __syncthreads\n",
        b.kernel_name, t, b.arrived);
    b.arrived = 0;
    ++b.gen;
  }
  if (b.warp_arrived[w] > 0 && b.warp_arrived[w] == b.warp_alive[w]) {
    std::fprintf(stderr,
                 "CUDA EMU NOTE: kernel %s: thread %d exited while %d threads of its warp wait at "
                 "a warp barrier\n",
                 b.kernel_name, t, b.warp_arrived[w]);
    b.warp_arrived[w] = 0;
    ++b.warp_gen[w];
  }
#if EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, b.sched_bottom, b.sched_size);
#endif
  void* dead;
  emu_switch(&dead, b.sched_sp);  // never resumed
  std::abort();
}

inline void Trampoline() { Entry(B().current); }

inline void RunBlockFibers(int n) {
  BlockState& b = B();
  auto& stacks = Stacks();
  while (static_cast<int>(stacks.size()) < n) {
    void* s = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) Die("mmap");
    stacks.push_back(s);
  }
  b.fibers.assign(n, Fiber{});
  b.alive = n;
  b.arrived = 0;
  b.gen = 0;
  b.warp_alive.assign((n + 31) / 32, 0);
  for (int t = 0; t < n; ++t) ++b.warp_alive[t / 32];
  b.warp_arrived.assign(b.warp_alive.size(), 0);
  b.warp_gen.assign(b.warp_alive.size(), 0);
  for (int t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.stack = stacks[t];
    char* top = static_cast<char*>(f.stack) + kStack;
#if EMU_ASAN
    __asan_unpoison_memory_region(top - 8192, 8192);
#endif
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                               // Trampoline's return address (never used)
    *--sp = reinterpret_cast<void*>(&Trampoline);  // emu_switch's ret target
    for (int r = 0; r < 6; ++r) *--sp = nullptr;   // rbp rbx r12..r15
    f.sp = sp;
  }
  // EMU_SCHED: 0 (default) threads resume in index order, 1 reverse, 2 a fresh random order every
  // pass; comparing results across orders exposes missing barriers (races on shared/global memory).
  static const int sched = [] {
    const char* e = std::getenv("EMU_SCHED");
    return e ? std::atoi(e) : 0;
  }();
  static uint64_t rng = 0x9e3779b97f4a7c15ull;
  std::vector<int> order(n);
  for (int t = 0; t < n; ++t) order[t] = sched == 1 ? n - 1 - t : t;
  int done = 0;
  while (done < n) {
    bool progress = false;
    if (sched == 2)
      for (int i = n - 1; i > 0; --i) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::swap(order[i], order[rng % (i + 1)]);
      }
    for (int oi = 0; oi < n; ++oi) {
      const int t = order[oi];
      Fiber& f = b.fibers[t];
      if (f.done) continue;
      const bool runnable = f.wait == 0 || (f.wait == 1 && b.gen != f.gen) ||
                            (f.wait == 2 && b.warp_gen[t / 32] != f.gen);
      if (!runnable) continue;
      f.wait = 0;
      b.current = t;
      threadIdx = uint3{static_cast<unsigned>(t), 0, 0};
#if EMU_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, f.stack, kStack);
#endif
      emu_switch(&b.sched_sp, f.sp);
#if EMU_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
      progress = true;
      if (f.done) ++done;
    }
    if (!progress) {
      threadIdx = uint3{0, 0, 0};
      Die("deadlock: threads wait at barriers that cannot complete");
    }
  }
  b.current = -1;
}

// Pointer arguments of a kernel must be null or inside a live cudaMalloc allocation.
template <class T>
inline void CheckArg(const char* name, int i, const T&) {}
template <class T>
inline void CheckArg(const char* name, int i, T* p) {
  if (p != nullptr && !FakeIsDevice(p, 1)) {
    std::fprintf(stderr, "CUDA EMU VIOLATION: kernel %s argument %d (%p) is not device memory\n",
                 name, i, (const void*)p);
    std::abort();
  }
}

// The dynamic shared memory a launch may ask for: 48 KB, or up to the
// H100's 227 KB where cudaFuncSetAttribute raised the kernel's limit.
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kMaxDynamicShared = 227 * 1024;

// `extern __shared__` storage of the running block (rewrite-launches turns
// the declaration into a call of this).
inline unsigned char* DynamicShared() {
  if (B().dynamic_shared == nullptr) Die("extern __shared__ used by a launch that asked for none");
  return B().dynamic_shared;
}

// Every byte 0xff: NaN as float and as bf16, so a read of shared memory
// that the block has not written shows in its results.
inline void FillDynamicShared() {
  BlockState& b = B();
  if (b.dynamic_bytes > 0) std::memset(b.dynamic_shared, 0xff, b.dynamic_bytes);
}

inline void CheckDynamicShared(const void* kernel, size_t bytes) {
  const size_t allowed = std::max<size_t>(kDefaultDynamicShared, FakeMaxDynamicShared(kernel));
  if (bytes > kMaxDynamicShared) Die("dynamic shared memory over 227 KB");
  if (bytes > allowed)
    Die("dynamic shared memory over 48 KB without cudaFuncSetAttribute("
        "cudaFuncAttributeMaxDynamicSharedMemorySize)");
}

template <class K, class... A>
void Launch(bool direct, const char* name, dim3 grid, dim3 block, size_t shared_bytes, K kernel,
            A... args) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  BlockState& b = B();
  b.kernel_name = name;
  CheckDynamicShared(reinterpret_cast<const void*>(kernel), shared_bytes);
  std::vector<unsigned char> dynamic(shared_bytes + 128);
  b.dynamic_shared =
      shared_bytes > 0 ? reinterpret_cast<unsigned char*>(
                             (reinterpret_cast<uintptr_t>(dynamic.data()) + 127) & ~uintptr_t{127})
                       : nullptr;
  b.dynamic_bytes = shared_bytes;
  {
    int i = 0;
    (CheckArg(name, i++, args), ...);
  }
  b.direct = direct;
  const int n = block.x * block.y * block.z;
  if (block.y != 1 || block.z != 1 || n % 32 != 0 || n > kMaxThreads || n <= 0)
    Die("unsupported block shape");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) Die("empty grid (invalid configuration on a GPU)");
  if (grid.y > 65535 || grid.z > 65535) Die("grid.y/z > 65535");
  const std::function<void()> body = [&] { kernel(args...); };
  b.body = &body;
  b.exchange.assign(n, 0.0f);
  b.mma_exchange.assign(static_cast<size_t>((n + 31) / 32) * kMmaExchange, 0.0f);
  gridDim = grid;
  blockDim = block;
  // EMU_BLOCK_ORDER: 0 (default) blocks run in index order, 1 reversed; a
  // result that changes with it means blocks depend on each other's order.
  static const bool reversed = [] {
    const char* e = std::getenv("EMU_BLOCK_ORDER");
    return e != nullptr && std::atoi(e) == 1;
  }();
  CountKernel();
  const uint64_t blocks = DryRun() ? 0 : uint64_t{grid.x} * grid.y * grid.z;
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t i = reversed ? blocks - 1 - k : k;
    blockIdx = uint3{static_cast<unsigned>(i % grid.x), static_cast<unsigned>(i / grid.x % grid.y),
                     static_cast<unsigned>(i / grid.x / grid.y)};
    FillDynamicShared();
    if (direct) {
      for (int t = 0; t < n; ++t) {
        threadIdx = uint3{static_cast<unsigned>(t), 0, 0};
        kernel(args...);
      }
    } else {
      RunBlockFibers(n);
    }
  }
  b.body = nullptr;
  b.dynamic_shared = nullptr;
  b.dynamic_bytes = 0;
}

inline float Shuffle(float v, int delta, bool up) {
  BlockState& b = B();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* ex = b.exchange.data() + warp * 32;
  SyncWarp();  // previous readers of ex are done
  ex[lane] = v;
  SyncWarp();
  const int src = up ? lane - delta : lane + delta;
  return (src >= 0 && src < 32) ? ex[src] : v;
}

}  // namespace emu

inline void __syncthreads() { emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) emu::Die("__syncwarp with a partial mask");
  emu::SyncWarp();
}
inline float __shfl_up_sync(unsigned mask, float v, int d) {
  if (mask != 0xffffffffu) emu::Die("shuffle with a partial mask");
  return emu::Shuffle(v, d, true);
}
inline float __shfl_down_sync(unsigned mask, float v, int d) {
  if (mask != 0xffffffffu) emu::Die("shuffle with a partial mask");
  return emu::Shuffle(v, d, false);
}
inline float __shfl_sync(unsigned mask, float v, int src) {
  if (mask != 0xffffffffu) emu::Die("shuffle with a partial mask");
  emu::BlockState& b = emu::B();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* ex = b.exchange.data() + warp * 32;
  emu::SyncWarp();
  ex[lane] = v;
  emu::SyncWarp();
  return ex[src & 31];
}
template <class T>
inline T min(T a, T b) {
  return a < b ? a : b;
}
template <class T>
inline T max(T a, T b) {
  return a > b ? a : b;
}

#define EMU_LAUNCH(grid, block, shared_bytes, kernel, ...) \
  emu::Launch(false, #kernel, grid, block, shared_bytes, kernel, __VA_ARGS__)
#define EMU_LAUNCH_DIRECT(grid, block, shared_bytes, kernel, ...) \
  emu::Launch(true, #kernel, grid, block, shared_bytes, kernel, __VA_ARGS__)
