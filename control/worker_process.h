// A real rdv-worker process, for tests, benchmarks and tools. Two kinds:
// - Start: a child of this process, started with posix_spawn;
// - Launch: a process on another host or container, started there by an
//   rdv-launcher (apps/rdv_launcher.cc) over gRPC, so that a test can still
//   kill, pause or restart its peer.
// Either is ready when rdv-worker prints its ready line (waited for with a
// bound) and is stopped with SIGTERM (SIGKILL after a bound), then reaped.
// Not thread-safe: one owner drives it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/status.h"

namespace rdv::control {

// Variables set (a value) or unset (nullopt) in the worker's environment,
// over the environment of whoever starts it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

class WorkerProcess {
 public:
  // Runs rdv-worker with `args` as a child; fails if it does not print its
  // ready line within `timeout` or exits first.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const std::vector<std::string>& args,
                                                             absl::Duration timeout,
                                                             const EnvChanges& env = {});
  // Asks the rdv-launcher at `launcher` (host:port) to run rdv-worker with
  // `args` on its host; `env` applies over the launcher's environment.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Launch(const std::string& launcher,
                                                              const std::vector<std::string>& args,
                                                              absl::Duration timeout,
                                                              const EnvChanges& env = {});
  virtual ~WorkerProcess() = default;  // a subclass's destructor Stop()s

  const std::string& worker_name() const { return worker_name_; }
  const std::string& address() const { return address_; }
  uint64_t incarnation() const { return incarnation_; }
  // The child's pid; -1 once reaped, and always for a launched worker.
  virtual pid_t pid() const = 0;

  // SIGKILL, then reap.
  virtual void Kill() = 0;
  // SIGTERM, reap within a bound, else SIGKILL. Returns the wait status
  // (0 for a clean exit, and when already reaped).
  virtual int Stop() = 0;
  // Any other signal (SIGSTOP, SIGCONT); the process is not reaped.
  virtual absl::Status Signal(int signal) = 0;

 protected:
  WorkerProcess() = default;
  // Parses "rdv-worker ready <name> <address> incarnation <hex>".
  absl::Status ParseReadyLine(const std::string& line);
  void SetIdentity(std::string worker_name, std::string address, uint64_t incarnation);

 private:
  std::string worker_name_;
  std::string address_;
  uint64_t incarnation_ = 0;
};

// A port of 127.0.0.1 nothing listens on now: bound to port 0, read back,
// released. Another process could take it before a worker does; the worker
// then fails to start and says so.
absl::StatusOr<int> FreeLoopbackPort();

// `count` rdv-workers on 127.0.0.1 that know each other: tasks 0..count-1
// of job "worker", each on a free port, each with `args` besides and, when
// given, task t with `task_env[t]`. Sets `cluster` to their addresses.
absl::StatusOr<std::vector<std::unique_ptr<WorkerProcess>>> StartLocalCluster(
    int count, const std::vector<std::string>& args, absl::Duration timeout,
    std::string* cluster, const std::vector<EnvChanges>& task_env = {});

}  // namespace rdv::control
