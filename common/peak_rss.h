// Resident memory of this process, now and at its peak. The peak is VmHWM
// from /proc/self/status, not getrusage's ru_maxrss, which Linux carries
// across execve, so a process started by a large parent would report the
// parent's peak.
#ifndef LACT_COMMON_PEAK_RSS_H_
#define LACT_COMMON_PEAK_RSS_H_

#include <cstdint>

namespace lact {

int64_t PeakRssBytes();
// Resident now (/proc/self/statm).
int64_t ResidentBytes();

}  // namespace lact

#endif  // LACT_COMMON_PEAK_RSS_H_
