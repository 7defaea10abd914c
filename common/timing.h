// Durations every process agrees on, elapsed time on the steady clock, and
// times as records show them.
#ifndef LACT_COMMON_TIMING_H_
#define LACT_COMMON_TIMING_H_

#include <chrono>
#include <cstdint>

namespace lact {

// How long a collective waits for its peers, and a shard for its client's
// stream and between its chunks, when the job's spec leaves it unset (and
// the coordinator's --collective-timeout-ms and --upload-idle-timeout-ms
// defaults).
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{60000};
inline constexpr std::chrono::milliseconds kDefaultUploadIdleTimeout{60000};
// A spec's timeout in milliseconds as a duration: `default_timeout` where
// the spec leaves it unset (0).
inline std::chrono::milliseconds SpecTimeout(int64_t spec_ms,
                                             std::chrono::milliseconds default_timeout) {
  return spec_ms > 0 ? std::chrono::milliseconds(spec_ms) : default_timeout;
}

// How long a finished job's results and state are kept when its spec
// leaves retain_seconds unset (the coordinator's --retain-seconds default).
inline constexpr std::chrono::seconds kDefaultRetain{3600};

// Seconds from `start` to now.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `t` (now by default) as seconds since the Unix epoch, as records show
// times.
inline double UnixSeconds(
    std::chrono::system_clock::time_point t = std::chrono::system_clock::now()) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace lact

#endif  // LACT_COMMON_TIMING_H_
