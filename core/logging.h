// The one logger of rdv. Writes to stderr (never stdout), one line per
// message, filtered by level. The level comes from RDV_LOG_LEVEL (error,
// warning, info, debug, trace or 0-4; default warning), read once on first
// use; SetLogLevel overrides it. Thread-safe.
#pragma once

#include <sstream>
#include "absl/strings/string_view.h"

namespace rdv {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
inline bool LogEnabled(LogLevel level) { return level <= CurrentLogLevel(); }
absl::string_view LogLevelName(LogLevel level);

// Accumulates one message and writes it when destroyed.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace rdv

// RDV_LOG(Info) << "text"; the stream is not evaluated when the level is off.
#define RDV_LOG(level)                                                          \
  for (bool rdv_log_on_ = ::rdv::LogEnabled(::rdv::LogLevel::k##level); rdv_log_on_; \
       rdv_log_on_ = false)                                                     \
  ::rdv::LogMessage(::rdv::LogLevel::k##level, __FILE__, __LINE__).stream()
