#include "ucx/ucx_log.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rdv::ucx_plugin {
namespace {

// The logs of live contexts, newest last. Never destroyed: UCX may log
// while the process exits.
std::mutex& RoutesMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<const plugin_support::PluginLog*>& Routes() {
  static auto* routes = new std::vector<const plugin_support::PluginLog*>;
  return *routes;
}

thread_local bool tearing_down = false;  // WorkerTeardown

// The ABI's levels: 0 error, 1 warning, 2 info, 3 debug, 4 trace.
int HostLevelOf(ucs_log_level_t level) {
  if (tearing_down && level <= UCS_LOG_LEVEL_WARN) return 2;
  switch (level) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR: return 0;
    case UCS_LOG_LEVEL_WARN: return 1;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO: return 2;
    case UCS_LOG_LEVEL_DEBUG: return 3;
    default: return 4;
  }
}

std::string Format(const char* format, va_list arguments) {
  char message[512];
  va_list copy;
  va_copy(copy, arguments);
  std::vsnprintf(message, sizeof message, format, copy);
  va_end(copy);
  return message;
}

}  // namespace

ucs_log_func_rc_t RouteToHostLog(const char* file, unsigned line, const char*,
                                 ucs_log_level_t level, const ucs_log_component_config_t*,
                                 const char* format, va_list arguments) {
  const std::string_view path(file);
  const std::string_view name = path.substr(path.find_last_of('/') + 1);
  const bool cma_failure = level == UCS_LOG_LEVEL_FATAL && name == "cma_ep.c";
  if (level == UCS_LOG_LEVEL_FATAL && !cma_failure) return UCS_LOG_FUNC_RC_CONTINUE;
  std::lock_guard lock(RoutesMu());
  if (Routes().empty()) return cma_failure ? UCS_LOG_FUNC_RC_STOP : UCS_LOG_FUNC_RC_CONTINUE;
  if (cma_failure) {
    (*Routes().back())(1, "UCX cma: " + Format(format, arguments) +
                              " (fatal to UCX 1.13; rdv fails this transfer instead)");
    return UCS_LOG_FUNC_RC_STOP;
  }
  (*Routes().back())(HostLevelOf(level), "UCX " + std::string(name) + ":" +
                                             std::to_string(line) + ": " +
                                             Format(format, arguments));
  return UCS_LOG_FUNC_RC_STOP;
}

WorkerTeardown::WorkerTeardown() { tearing_down = true; }
WorkerTeardown::~WorkerTeardown() { tearing_down = false; }

LogRoute::LogRoute(const plugin_support::PluginLog* log) : log_(log) {
  std::lock_guard lock(RoutesMu());
  Routes().push_back(log_);
}

LogRoute::~LogRoute() {
  std::lock_guard lock(RoutesMu());
  std::vector<const plugin_support::PluginLog*>& routes = Routes();
  routes.erase(std::find(routes.begin(), routes.end(), log_));
}

}  // namespace rdv::ucx_plugin
