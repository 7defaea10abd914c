// The words a worker and the coordinator both use for results whose
// retention time passed, so a client is told the same whichever of them
// answers (JobInfo.results_dropped, a worker's FetchResult).
#ifndef LACT_COMMON_RETENTION_TEXT_H_
#define LACT_COMMON_RETENTION_TEXT_H_

namespace lact {

inline constexpr char kRetentionExpired[] = "expired: its retention time passed";

}  // namespace lact

#endif  // LACT_COMMON_RETENTION_TEXT_H_
