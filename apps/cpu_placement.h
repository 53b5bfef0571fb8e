// Which CPUs a tool's processes run on (rdv-bench --cpu and --peer_cpu).
// Linux affinity is per thread: a pin applies to the calling thread and to
// the threads and children it starts afterwards, not to threads already
// running. So a tool pins before it starts its workers.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdv {

// The CPUs this process may run on now.
absl::StatusOr<cpu_set_t> CpusAllowed();

// OK for -1 (unpinned) and for a CPU in `allowed`; else INVALID_ARGUMENT
// naming `flag` and the CPUs allowed.
absl::Status CheckCpu(absl::string_view flag, int cpu, const cpu_set_t& allowed);

// Pins the calling thread to `cpu`; -1 gives it `allowed` back.
absl::Status PinThreadTo(int cpu, const cpu_set_t& allowed);

// "CPU 3" or "CPUs 0,1": where `pid`'s main thread may run (0: the caller).
std::string CpusOf(pid_t pid);

}  // namespace rdv
