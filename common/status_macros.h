// Early-return helpers for absl::Status / absl::StatusOr, in the style of
// LevelDB and NCCL: errors travel up as values, nothing aborts.
#ifndef LACT_COMMON_STATUS_MACROS_H_
#define LACT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LACT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status lact_status_ = (expr);        \
    if (!lact_status_.ok()) return lact_status_; \
  } while (0)

#define LACT_CONCAT_INNER_(a, b) a##b
#define LACT_CONCAT_(a, b) LACT_CONCAT_INNER_(a, b)

#define LACT_ASSIGN_OR_RETURN(lhs, expr) \
  LACT_ASSIGN_OR_RETURN_IMPL_(LACT_CONCAT_(lact_statusor_, __LINE__), lhs, expr)

#define LACT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#endif  // LACT_COMMON_STATUS_MACROS_H_
