// A real rdv-worker process, for tests, benchmarks and tools: started with posix_spawn, ready
// when it prints its ready line (waited for with a bound), stopped with
// SIGTERM (or SIGKILL) and reaped.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/status.h"

namespace rdv::control {

class WorkerProcess {
 public:
  // Runs rdv-worker with `args`; fails if it does not print its ready line
  // within `timeout` or exits first.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const std::vector<std::string>& args,
                                                             absl::Duration timeout);
  ~WorkerProcess();  // Stop()

  const std::string& worker_name() const { return worker_name_; }
  const std::string& address() const { return address_; }
  uint64_t incarnation() const { return incarnation_; }
  pid_t pid() const { return pid_; }

  // SIGKILL, then reap.
  void Kill();
  // SIGTERM, reap within a bound, else SIGKILL. Returns the exit status.
  int Stop();

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string worker_name_;
  std::string address_;
  uint64_t incarnation_ = 0;
};

}  // namespace rdv::control
