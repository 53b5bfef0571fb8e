// UCX's own log lines (its warnings and errors, and more where UCX_LOG_LEVEL
// asks for it) go to the host's logger, as the plugin's own do, so that
// RDV_LOG_LEVEL governs them too and they keep rdv's format. Every context
// of a process logs to the same host logger, so any live one's log serves;
// while none lives, UCX prints them itself. Fatal lines stay UCX's: it
// aborts after them. But for cma's: UCX 1.13 aborts the process when cma's
// process_vm_readv or writev fails on an endpoint without peer-failure
// handling (every endpoint over shared memory: posix cannot report a lost
// peer), as it does when the peer process exited mid-transfer (ESRCH). The
// copy has already failed by then and UCX returns the error to the
// operation once the log returns, so the handler keeps the process alive
// and that transfer fails (UNAVAILABLE), and logs the line as a warning.
#pragma once

#include <ucs/debug/log_def.h>

#include <cstdarg>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {

// UCX's log handler (ucs_log_push_handler, the plugin's only one) that
// hands lines to a live context's log. Any thread, inside UCX's calls; does
// not block beyond the host logger's own lock.
ucs_log_func_rc_t RouteToHostLog(const char* file, unsigned line, const char* function,
                                 ucs_log_level_t level, const ucs_log_component_config_t* config,
                                 const char* format, va_list arguments);

// While it lives on a thread, the lines UCX logs on that thread are about
// what a worker being destroyed still held (values in flight when their
// worker stops, which a stopping worker drops by design): RouteToHostLog
// logs its warnings and errors at info.
class WorkerTeardown {
 public:
  WorkerTeardown();
  ~WorkerTeardown();
  WorkerTeardown(const WorkerTeardown&) = delete;
  WorkerTeardown& operator=(const WorkerTeardown&) = delete;
};

// While it lives, RouteToHostLog may log through `log`, which must outlive
// it and be configured before.
class LogRoute {
 public:
  explicit LogRoute(const plugin_support::PluginLog* log);
  ~LogRoute();
  LogRoute(const LogRoute&) = delete;
  LogRoute& operator=(const LogRoute&) = delete;

 private:
  const plugin_support::PluginLog* log_;
};

}  // namespace rdv::ucx_plugin
