#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace lact {
namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    default:
      return spdlog::level::info;
  }
}

// The logger, made on first use with the name `program`; InitLog remakes it.
std::shared_ptr<spdlog::logger> MakeLogger(const std::string& program, LogLevel level) {
  auto logger =
      std::make_shared<spdlog::logger>("lact", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  // The message (%v) is the rest of the object, its values escaped by
  // nlohmann::json; the program name is escaped the same way.
  const std::string name = nlohmann::json(program).dump();
  logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      absl::StrCat(R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","process":)", name, ",%v}"),
      spdlog::pattern_time_type::utc));
  logger->set_level(ToSpdlog(level));
  logger->flush_on(spdlog::level::debug);
  return logger;
}

// The process's logger; InitLog replaces it.
struct Current {
  absl::Mutex mu;
  std::shared_ptr<spdlog::logger> logger ABSL_GUARDED_BY(mu) = MakeLogger("lact", LogLevel::kInfo);
};
Current& TheLogger() {
  static Current* current = new Current();
  return *current;
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-level '", name, "': one of debug, info, warn, error"));
}

void InitLog(const std::string& program, LogLevel level) {
  Current& c = TheLogger();
  absl::MutexLock lock(&c.mu);
  c.logger = MakeLogger(program, level);
}

absl::Status InitLogFromFlag(const std::string& program, const std::optional<std::string>& level) {
  absl::StatusOr<LogLevel> parsed = ParseLogLevel(level.value_or("info"));
  if (!parsed.ok()) return parsed.status();
  InitLog(program, *parsed);
  return absl::OkStatus();
}

void Log(LogLevel level, const std::string& event, const nlohmann::json& fields) {
  std::shared_ptr<spdlog::logger> logger;
  {
    Current& c = TheLogger();
    absl::MutexLock lock(&c.mu);
    logger = c.logger;
  }
  if (!logger->should_log(ToSpdlog(level))) return;
  nlohmann::json line = fields.is_object() ? fields : nlohmann::json::object();
  std::string rest = nlohmann::json{{"event", event}}.dump();
  rest = rest.substr(1, rest.size() - 2);
  if (!line.empty()) {
    const std::string more = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    absl::StrAppend(&rest, ",", more.substr(1, more.size() - 2));
  }
  logger->log(ToSpdlog(level), "{}", rest);
}

}  // namespace lact
