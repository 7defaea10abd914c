// Structured logs: one JSON object per line on stderr, written by spdlog,
//   {"time":"2026-12-01T18:55:02.123Z","level":"info","process":"lact-coordinator",
//    "event":"job_ended","job":"job-...","status":"FAILED","error":"..."}
// so a log pipeline (Loki, Elasticsearch, jq) reads fields, not prose.
// Contract: a server calls InitLog once, first (the program name and the
// --log-level it was given); Log is then thread-safe from any thread.
// Before InitLog, Log writes at level info under the name "lact".
#ifndef LACT_COMMON_LOG_H_
#define LACT_COMMON_LOG_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lact {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// "debug", "info", "warn" or "error"; INVALID_ARGUMENT naming them otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name);

void InitLog(const std::string& program, LogLevel level);
// InitLog at the level a --log-level flag names (info when absent), or
// its INVALID_ARGUMENT.
absl::Status InitLogFromFlag(const std::string& program, const std::optional<std::string>& level);

// One line: `event` (a snake_case name) and `fields` (an object), at `level`.
void Log(LogLevel level, const std::string& event, const nlohmann::json& fields = {});

}  // namespace lact

#endif  // LACT_COMMON_LOG_H_
