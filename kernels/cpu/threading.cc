#include "kernels/cpu/threading.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace lact::cpu {

void SetNumThreads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int NumThreads() { return omp_get_max_threads(); }

void FaultInPages(char* data, size_t bytes) {
  constexpr size_t kPage = 4096;
  const int64_t pages = static_cast<int64_t>((bytes + kPage - 1) / kPage);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pages; ++p) data[static_cast<size_t>(p) * kPage] = 0;
}

namespace {
std::atomic<bool> row_slices{true};
}  // namespace

void SetRowSlices(bool on) { row_slices.store(on, std::memory_order_relaxed); }

int ForRowSlices(int64_t n, int64_t min_rows, absl::FunctionRef<void(int64_t, int64_t, int)> fn) {
  const int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(1, min_rows));
  const int threads = static_cast<int>(std::min<int64_t>(NumThreads(), most));
  if (threads <= 1 || omp_in_parallel() || !row_slices.load(std::memory_order_relaxed)) {
    fn(0, n, 0);
    return 1;
  }
  int slices = 1;
#pragma omp parallel num_threads(threads)
  {
    const int slot = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t begin = n * slot / count, end = n * (slot + 1) / count;
    // This thread's own setting, for the region: nested loops run on one
    // thread even where OMP_MAX_ACTIVE_LEVELS allows nesting.
    omp_set_num_threads(1);
    fn(begin, end - begin, slot);
    if (slot == 0) slices = count;
  }
  return slices;
}

}  // namespace lact::cpu
