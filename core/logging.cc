#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rdv {
namespace {

constexpr LogLevel kDefaultLevel = LogLevel::kWarning;

LogLevel LevelFromEnvironment() {
  const char* env = std::getenv("RDV_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return kDefaultLevel;
  const std::string value = absl::AsciiStrToLower(env);
  for (int i = 0; i <= static_cast<int>(LogLevel::kTrace); ++i) {
    const auto level = static_cast<LogLevel>(i);
    if (value == LogLevelName(level)) return level;
  }
  if (value == "warn") return LogLevel::kWarning;
  int number = 0;
  if (absl::SimpleAtoi(value, &number) && number >= 0 &&
      number <= static_cast<int>(LogLevel::kTrace)) {
    return static_cast<LogLevel>(number);
  }
  std::fprintf(stderr,
               "rdv: RDV_LOG_LEVEL='%s' is not one of error, warning, info, debug, "
               "trace or 0-4; using warning\n",
               env);
  return kDefaultLevel;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnvironment())};
  return level;
}

}  // namespace

LogLevel CurrentLogLevel() {
  return static_cast<LogLevel>(LevelStorage().load(std::memory_order_relaxed));
}

void SetLogLevel(LogLevel level) {
  LevelStorage().store(static_cast<int>(level), std::memory_order_relaxed);
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kTrace: return "trace";
  }
  return "unknown";
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const absl::string_view path(file);
  const auto slash = path.find_last_of('/');
  stream_ << absl::FormatTime("%H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << " rdv "
          << LogLevelName(level_) << ' '
          << (slash == absl::string_view::npos ? path : path.substr(slash + 1)) << ':' << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One fwrite per message keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace rdv
