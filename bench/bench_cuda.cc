// GPU yardsticks and the chunked selective scan on the first CUDA device:
// device-to-device copy bandwidth (bytes read + written), cuBLAS GEMM rates
// (bf16 inputs with fp32 accumulation, and true fp32 with TF32 off), and
// cuda::SsdScan on a preset:base-like shape as effective bandwidth (x, B, C,
// dt read, y written, state in and out), as a fraction of the copy
// bandwidth, and against the per-token recurrence (ScanRecurrence) on the
// same input; beside it the bf16 tensor-core scan (SsdScanBf16) on the
// same input rounded to bf16. Every time is the mean of 10 runs after a warm-up (the
// recurrence, which takes seconds: one run). Then the whole model
// (cuda_model_bench.h): preset:base on a `--tokens` context (default
// 1,048,576) on one rank in bf16, its model FLOP/s against the bf16 GEMM
// rate measured above and its kernel and GEMM launches per 65,536-token tile
// (kernels/cuda/traffic.h), and on two ranks sharing the GPU, the share of the
// gradient all-reduce hidden behind the BiMamba kernels. Prints a JSON line
// per part as it is measured and writes them all as one object to --json;
// exits 1 when no CUDA device is visible. --quick leaves out the scan's
// window sweep and recurrence, and runs the model on one rank only, with
// the fp32 scan and with the bf16 one: a rerun's figures in about a
// minute. --no-model stops after the scan.
//   bench_cuda [--json FILE] [--tokens N] [--quick] [--no-model]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/cuda_model_bench.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/ssd_scan.h"
#include "kernels/cuda/ssd_scan_bf16.h"
#include "kernels/cuda/traffic.h"
#include "nlohmann/json.hpp"

namespace lact::bench {
namespace {

constexpr int kReps = 10;

// A pair of CUDA events around work enqueued on a stream.
class EventTimer {
 public:
  ~EventTimer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  absl::Status Init() {
    LACT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
    return absl::OkStatus();
  }
  // Seconds per call of `fn` over `reps` calls, after `warmups` untimed ones.
  absl::StatusOr<double> Time(cudaStream_t s, int warmups, int reps,
                              const std::function<absl::Status()>& fn) {
    for (int i = 0; i < warmups; ++i) LACT_RETURN_IF_ERROR(fn());
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, s));
    for (int i = 0; i < reps; ++i) LACT_RETURN_IF_ERROR(fn());
    LACT_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, s));
    LACT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0;
    LACT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return 1e-3 * ms / reps;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Uniform floats in [lo, hi) from a fixed xorshift sequence (fast enough for
// hundreds of millions of values).
void FillUniform(std::vector<float>& v, uint64_t seed, float lo, float hi) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>((s >> 40) * 0x1.0p-24);
  }
}

absl::StatusOr<cuda::DeviceBuffer> Upload(const std::vector<float>& host) {
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, cuda::DeviceBuffer::Allocate(host.size()));
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

// Device-to-device cudaMemcpy of 2 GiB, GB/s counting bytes read + written.
absl::StatusOr<double> CopyBandwidth(cudaStream_t s, EventTimer& timer) {
  const size_t floats = size_t{1} << 29;
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer src, cuda::DeviceBuffer::Allocate(floats));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer dst, cuda::DeviceBuffer::Allocate(floats));
  LACT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(src.get(), 0, floats * sizeof(float), s));
  LACT_ASSIGN_OR_RETURN(const double seconds, timer.Time(s, 2, kReps, [&]() -> absl::Status {
    LACT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.get(), src.get(), floats * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return absl::OkStatus();
  }));
  return 2.0 * floats * sizeof(float) / seconds / 1e9;
}

// cuBLAS n^3 GEMM rates in TFLOP/s: bf16 inputs with fp32 output and
// accumulation, and fp32 with TF32 off.
absl::StatusOr<std::pair<double, double>> GemmRates(cudaStream_t s, EventTimer& timer) {
  const int n = 8192;
  const size_t elements = size_t{n} * n;
  cublasHandle_t handle = nullptr;
  LACT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  std::unique_ptr<cublasContext, decltype(&cublasDestroy)> owner(handle, cublasDestroy);
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, s));
  std::vector<float> host(elements);
  FillUniform(host, 1, -1, 1);
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer a, Upload(host));
  FillUniform(host, 2, -1, 1);
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, Upload(host));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer c, cuda::DeviceBuffer::Allocate(elements));
  std::vector<uint16_t> half(elements);  // bf16: the top 16 bits of the fp32 value
  for (size_t i = 0; i < elements; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &host[i], sizeof(bits));
    half[i] = static_cast<uint16_t>(bits >> 16);
  }
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer a16, cuda::DeviceBuffer::Allocate(elements / 2));
  LACT_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(a16.get(), half.data(), elements * 2, cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  const double flops = 2.0 * n * n * n;

  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  LACT_ASSIGN_OR_RETURN(const double bf16, timer.Time(s, 1, kReps, [&]() -> absl::Status {
    LACT_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a16.get(), CUDA_R_16BF, n, a16.get(),
        CUDA_R_16BF, n, &beta, c.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }));
  LACT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));  // no TF32
  LACT_ASSIGN_OR_RETURN(const double fp32, timer.Time(s, 1, kReps, [&]() -> absl::Status {
    LACT_CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                                            a.get(), n, b.get(), n, &beta, c.get(), n));
    return absl::OkStatus();
  }));
  return std::make_pair(flops / bf16 / 1e12, flops / fp32 / 1e12);
}

// A scan's inputs on the device: x, B and C as column slices of one row
// of xbc, dt log-uniform in [0.001, 0.1] (Mamba's range), and room for y.
struct ScanBuffers {
  cuda::DeviceBuffer xbc, dt, a_log, d_skip, state, y;
};

absl::StatusOr<ScanBuffers> ScanInputs(int64_t T, int H, int P, int N) {
  const int64_t width = int64_t{H} * P, ld = width + 2 * N;
  std::vector<float> xbc(T * ld), dt(T * H), a_log(H), d_skip(H, 1.0f), state(width * N, 0.0f);
  FillUniform(xbc, 3, -1, 1);
  FillUniform(dt, 4, std::log(1e-3f), std::log(1e-1f));
  for (float& v : dt) v = std::exp(v);
  FillUniform(a_log, 5, 0, std::log(16.0f));
  ScanBuffers b;
  LACT_ASSIGN_OR_RETURN(b.xbc, Upload(xbc));
  LACT_ASSIGN_OR_RETURN(b.dt, Upload(dt));
  LACT_ASSIGN_OR_RETURN(b.a_log, Upload(a_log));
  LACT_ASSIGN_OR_RETURN(b.d_skip, Upload(d_skip));
  LACT_ASSIGN_OR_RETURN(b.state, Upload(state));
  LACT_ASSIGN_OR_RETURN(b.y, cuda::DeviceBuffer::Allocate(T * width));
  return b;
}

// The scan's time for each window of chunks it keeps in flight.
absl::Status SweepWindows(cudaStream_t s, EventTimer& timer,
                          const std::function<absl::Status(cuda::SsdWorkspace&, bool)>& scan,
                          nlohmann::json* result) {
  nlohmann::json windows = nlohmann::json::array();
  for (int64_t chunks : {16, 64, 256, 1024}) {
    cuda::SsdWorkspace sized(chunks);
    LACT_ASSIGN_OR_RETURN(const double t,
                          timer.Time(s, 1, kReps, [&] { return scan(sized, true); }));
    windows.push_back({{"window_chunks", chunks}, {"ms", 1e3 * t}});
  }
  (*result)["window_sweep"] = windows;
  return absl::OkStatus();
}

// The scan of `b`'s T rows (x, B, C column slices of one row, as in the
// runner) in sequence order, or `reversed`: walked from the last row
// through negated strides, y written back in row order (the backward
// direction's form).
cuda::SsdScanParams ScanOf(const ScanBuffers& b, int64_t T, int H, int P, int N, bool reversed) {
  const int64_t width = int64_t{H} * P, ld = width + 2 * N;
  const int64_t first = reversed ? T - 1 : 0;
  const cuda::MixerRows<float> rows{b.xbc.get() + first * ld,  ld,    b.dt.get() + first * H, H,
                                    b.y.get() + first * width, width, reversed ? -1 : 1};
  return cuda::MixerScan<cuda::SsdScanParams>(T, H, P, N, rows, b.a_log.get(), b.d_skip.get());
}

// The bf16 tensor-core scan (SsdScanBf16) on the same inputs rounded to
// bf16, y in bf16: forward, reversed and state-only, and the bytes of
// global memory its arguments name per head-token (the state passing's
// few segment states left out).
absl::StatusOr<nlohmann::json> Bf16ScanBench(cudaStream_t s, EventTimer& timer,
                                             const ScanBuffers& buffers, int64_t T, int H, int P,
                                             int N) {
  const int64_t width = int64_t{H} * P, ld = width + 2 * N;
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer xbc16, cuda::DeviceBuffer::Allocate(T * ld / 2 + 1));
  LACT_ASSIGN_OR_RETURN(cuda::DeviceBuffer y16, cuda::DeviceBuffer::Allocate(T * width / 2 + 1));
  auto* const xbc = reinterpret_cast<__nv_bfloat16*>(xbc16.get());
  LACT_RETURN_IF_ERROR(cuda::RoundToBf16(s, buffers.xbc.get(), T * ld, xbc));
  auto params = [&](bool reversed, bool with_y) {
    const int64_t first = reversed ? T - 1 : 0;
    auto* const y = reinterpret_cast<__nv_bfloat16*>(y16.get()) + first * width;
    const cuda::MixerRows<__nv_bfloat16> rows{
        xbc + first * ld, ld, buffers.dt.get() + first * H, H, with_y ? y : nullptr, width,
        reversed ? -1 : 1};
    return cuda::MixerScan<cuda::SsdScanBf16Params>(T, H, P, N, rows, buffers.a_log.get(),
                                                    buffers.d_skip.get());
  };
  cuda::SsdWorkspace ws;
  auto time = [&](bool reversed, bool with_y) {
    return timer.Time(s, 1, kReps, [&] {
      return cuda::SsdScanBf16(s, ws, params(reversed, with_y), buffers.state.get(), nullptr);
    });
  };
  LACT_ASSIGN_OR_RETURN(const double forward, time(false, true));
  LACT_ASSIGN_OR_RETURN(const double backward, time(true, true));
  LACT_ASSIGN_OR_RETURN(const double state_only, time(false, false));
  // x, B and dt read by both walks, C by the output walk, y written; B and
  // C are one row for all H heads (the heads' blocks share it through L2).
  const double unique_bytes = 2 * (2.0 * P) + 2.0 * (2 * N + N) / H + 2 * 4.0 + 2.0 * P;
  return nlohmann::json{{"ms", 1e3 * forward},
                        {"reversed_ms", 1e3 * backward},
                        {"state_only_ms", 1e3 * state_only},
                        {"head_tokens_per_s", H * T / forward},
                        {"global_bytes_per_head_token", unique_bytes}};
}

// SsdScan on T = 65536 tokens of a preset:base-like mixer (H = 24 heads,
// P = 64, N = 128), x, B, C column slices of one row as in the runner.
absl::StatusOr<nlohmann::json> ScanBench(cudaStream_t s, EventTimer& timer, double copy_gbps,
                                         bool quick) {
  const int64_t T = 65536;
  const int H = 24, P = 64, N = 128;
  const int64_t width = int64_t{H} * P, ld = width + 2 * N;
  LACT_ASSIGN_OR_RETURN(ScanBuffers buffers, ScanInputs(T, H, P, N));
  const cuda::DeviceBuffer &dt_d = buffers.dt, &a_log_d = buffers.a_log, &d_skip_d = buffers.d_skip,
                           &state_d = buffers.state, &y_d = buffers.y;
  const float* x = buffers.xbc.get();
  const cuda::SsdScanParams forward = ScanOf(buffers, T, H, P, N, false);
  auto scan = [&](cuda::SsdWorkspace& ws, bool with_y) {
    cuda::SsdScanParams p = forward;
    if (!with_y) p.y = nullptr;
    return cuda::SsdScan(s, ws, p, state_d.get(), nullptr);
  };
  auto reversed = [&](cuda::SsdWorkspace& ws) {
    return cuda::SsdScan(s, ws, ScanOf(buffers, T, H, P, N, true), state_d.get(), nullptr);
  };
  cuda::SsdWorkspace ws;
  LACT_ASSIGN_OR_RETURN(const double ssd, timer.Time(s, 1, kReps, [&] { return scan(ws, true); }));
  LACT_ASSIGN_OR_RETURN(const double backward,
                        timer.Time(s, 1, kReps, [&] { return reversed(ws); }));
  // The same scan with its products on the tensor cores (3xTF32).
  cuda::SsdWorkspace tensor(0, cuda::SsdMath::kTf32x3);
  LACT_ASSIGN_OR_RETURN(const double tf32x3,
                        timer.Time(s, 1, kReps, [&] { return scan(tensor, true); }));
  LACT_ASSIGN_OR_RETURN(const double state_only,
                        timer.Time(s, 1, kReps, [&] { return scan(ws, false); }));
  LACT_ASSIGN_OR_RETURN(nlohmann::json bf16, Bf16ScanBench(s, timer, buffers, T, H, P, N));
  bf16["speedup_over_fp32_scan"] = ssd / (1e-3 * bf16["ms"].get<double>());
  const double bytes = 4.0 * (T * width + 2 * T * N + T * H + T * width + 2 * width * N);
  const double gbps = bytes / ssd / 1e9;
  nlohmann::json result{{"tokens", T},
                        {"heads", H},
                        {"head_dim", P},
                        {"d_state", N},
                        {"bytes", bytes},
                        {"ms", 1e3 * ssd},
                        {"reversed_ms", 1e3 * backward},
                        {"head_tokens_per_s", H * T / ssd},
                        {"tf32x3_ms", 1e3 * tf32x3},
                        {"tf32x3_head_tokens_per_s", H * T / tf32x3},
                        {"gbps", gbps},
                        {"of_copy", gbps / copy_gbps},
                        {"state_only_ms", 1e3 * state_only},
                        {"bf16", bf16}};
  if (quick) return result;
  auto recurrence = [&](int64_t tokens) {
    return cuda::ScanRecurrence(s, tokens, H, P, N, x, ld, x + width, ld, x + width + N, ld,
                                dt_d.get(), H, a_log_d.get(), d_skip_d.get(), y_d.get(), width,
                                state_d.get());
  };
  LACT_RETURN_IF_ERROR(SweepWindows(s, timer, scan, &result));
  LACT_RETURN_IF_ERROR(recurrence(64));
  LACT_ASSIGN_OR_RETURN(const double naive, timer.Time(s, 0, 1, [&] { return recurrence(T); }));
  result["recurrence_ms"] = 1e3 * naive;
  result["speedup_over_recurrence"] = naive / ssd;
  return result;
}

void PrintLine(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

absl::StatusOr<nlohmann::json> RunMicro(bool quick) {
  LACT_CUDA_RETURN_IF_ERROR(cudaSetDevice(0));
  cudaDeviceProp prop;
  LACT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s = nullptr;
  LACT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(s, cudaStreamDestroy);
  EventTimer timer;
  LACT_RETURN_IF_ERROR(timer.Init());
  LACT_ASSIGN_OR_RETURN(const double copy_gbps, CopyBandwidth(s, timer));
  LACT_ASSIGN_OR_RETURN(const auto gemm, GemmRates(s, timer));
  LACT_ASSIGN_OR_RETURN(nlohmann::json scan, ScanBench(s, timer, copy_gbps, quick));
  return nlohmann::json{{"device", prop.name},
                        {"copy_gbps", copy_gbps},
                        {"bf16_gemm_tflops", gemm.first},
                        {"fp32_gemm_tflops", gemm.second},
                        {"ssd_scan", scan}};
}

absl::StatusOr<nlohmann::json> RunModel(int64_t tokens, int ranks, double bf16_gemm_tflops,
                                        const std::string& scan_math) {
  cuda::ResetTraffic();
  LACT_ASSIGN_OR_RETURN(ModelBenchResult r,
                        RunModelBench("base", tokens, cuda::Precision::kBf16, ranks, scan_math));
  // Every rank runs its shard twice (a warm-up, then timed), in 65,536-token tiles.
  int64_t launches = 0;
  for (const auto& [family, f] : cuda::TrafficByFamily()) launches += f.launches;
  const double tiles = ranks * std::ceil(static_cast<double>(tokens) / ranks / 65536);
  const double tflops = r.model_flops / r.seconds * 1e-12;
  nlohmann::json j{{"model", "preset:base"},
                   {"tokens", tokens},
                   {"precision", "bf16"},
                   {"scan_math", scan_math},
                   {"ranks", ranks},
                   {"seconds", r.seconds},
                   {"tokens_per_s", tokens / r.seconds},
                   {"model_tflops", tflops},
                   {"of_bf16_gemm", tflops / bf16_gemm_tflops},
                   {"launches_per_tile", launches / (2 * tiles)}};
  if (ranks > 1) {
    j["allreduce_seconds"] = r.allreduce_seconds;
    j["allreduce_hidden"] = r.hidden_fraction();
  }
  return j;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags =
      Flags::Parse(std::vector<std::string>(argv + 1, argv + argc),
                   {"json", "tokens", "quick", "no-model"}, {}, {"quick", "no-model"});
  absl::StatusOr<int64_t> tokens =
      flags.ok() ? flags->Int("tokens", 1 << 20, 2, int64_t{1} << 26) : flags.status();
  if (!tokens.ok()) {
    std::fprintf(stderr, "bench_cuda: %s\n", std::string(tokens.status().message()).c_str());
    return 2;
  }
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "bench_cuda: no CUDA device\n");
    return 1;
  }
  nlohmann::json all;
  const auto save = [&] {
    if (std::optional<std::string> path = flags->Get("json"))
      std::ofstream(*path) << all.dump(2) << "\n";
  };
  const bool quick = flags->Has("quick");
  absl::StatusOr<nlohmann::json> micro = RunMicro(quick);
  if (!micro.ok()) {
    std::fprintf(stderr, "bench_cuda: %s\n", std::string(micro.status().message()).c_str());
    return 1;
  }
  PrintLine(*micro);
  all = *micro;
  save();
  // One rank with each scan math, then two ranks.
  std::vector<std::pair<int, const char*>> runs = {{1, "fp32"}, {1, "bf16"}};
  if (!quick) {
    runs.emplace_back(1, "tf32x3");
    runs.emplace_back(2, "fp32");
  }
  if (flags->Has("no-model")) runs.clear();
  for (auto [ranks, scan_math] : runs) {
    absl::StatusOr<nlohmann::json> model =
        RunModel(*tokens, ranks, (*micro)["bf16_gemm_tflops"].get<double>(), scan_math);
    if (!model.ok()) {
      std::fprintf(stderr, "bench_cuda: model on %d ranks: %s\n", ranks,
                   std::string(model.status().message()).c_str());
      return 1;
    }
    PrintLine(*model);
    all["model"].push_back(*model);
    save();
  }
  return 0;
}

}  // namespace
}  // namespace lact::bench

int main(int argc, char** argv) { return lact::bench::Main(argc, argv); }
