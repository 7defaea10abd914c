// WarmHeap against the kernel's own count of page faults: after it, a
// large buffer allocated and filled takes pages the process already holds.
// Each case runs in a child process of its own, since the policy is the
// whole process's.
#include "common/malloc_policy.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace lact {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The page faults a 192 MiB buffer's allocation and zero fill cost, counted
// in a child process after `prepare` ran there; -1 if the child failed.
int64_t FaultsOfFreshBuffer(const std::function<void()>& prepare) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    prepare();
    const int64_t before = MinorFaults();
    std::vector<float> buffer(192 * kMiB / sizeof(float));
    const int64_t faults = MinorFaults() - before;
    const bool wrote = write(fds[1], &faults, sizeof faults) == sizeof faults;
    _exit(wrote && buffer[12345] == 0.0f ? 0 : 1);
  }
  close(fds[1]);
  int64_t faults = -1;
  if (read(fds[0], &faults, sizeof faults) != sizeof faults) faults = -1;
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? faults : -1;
}

TEST(WarmHeap, LargeBuffersTakeThePagesItTouched) {
  const int64_t warmed = FaultsOfFreshBuffer([] {
    KeepFreedMemory();
    if (!WarmHeap(256 * kMiB).ok()) _exit(2);
  });
  const int64_t cold = FaultsOfFreshBuffer([] { KeepFreedMemory(); });
  ASSERT_GE(warmed, 0);
  ASSERT_GE(cold, 0);
  // Fresh, the buffer faults at least once per 2 MiB huge page (96 times),
  // or once per 4 KiB page where huge pages are not given.
  EXPECT_GE(cold, 96);
  EXPECT_LE(warmed, 8) << "against " << cold << " without warming";
}

TEST(WarmHeap, FreedBuffersStayWarmForTheNext) {
  const int64_t faults = FaultsOfFreshBuffer([] {
    KeepFreedMemory();
    std::vector<float> earlier(224 * kMiB / sizeof(float), 1.0f);
    if (earlier[7] != 1.0f) _exit(2);
  });
  ASSERT_GE(faults, 0);
  EXPECT_LE(faults, 8);
}

TEST(WarmHeap, NothingToWarmIsOk) {
  EXPECT_TRUE(WarmHeap(0).ok());
  EXPECT_TRUE(WarmHeap(-5).ok());
}

TEST(WarmHeap, MoreThanTheAddressSpaceIsResourceExhausted) {
  const int64_t faults = FaultsOfFreshBuffer([] {
    KeepFreedMemory();
    const absl::Status status = WarmHeap(int64_t{1} << 60);
    if (status.code() != absl::StatusCode::kResourceExhausted) _exit(2);
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
  });
  EXPECT_GE(faults, 0) << "WarmHeap(2^60) did not answer ResourceExhausted";
}

}  // namespace
}  // namespace lact
