#include "apps/cpu_placement.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdv {
namespace {

std::string CpuList(const cpu_set_t& set) {
  std::string cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) absl::StrAppend(&cpus, cpus.empty() ? "" : ",", i);
  }
  return cpus;
}

}  // namespace

absl::StatusOr<cpu_set_t> CpusAllowed() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  return allowed;
}

absl::Status CheckCpu(absl::string_view flag, int cpu, const cpu_set_t& allowed) {
  if (cpu == -1 || (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &allowed))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", cpu,
                                                 ": this process may run on CPUs ",
                                                 CpuList(allowed), " only (or give -1: unpinned)"));
}

absl::Status PinThreadTo(int cpu, const cpu_set_t& allowed) {
  cpu_set_t set = allowed;
  if (cpu >= 0) {
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot run on CPU ", cpu, ": ",
                                                   std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string CpusOf(pid_t pid) {
  cpu_set_t set;
  if (sched_getaffinity(pid, sizeof(set), &set) != 0) return "CPUs unknown";
  return absl::StrCat(CPU_COUNT(&set) == 1 ? "CPU " : "CPUs ", CpuList(set));
}

}  // namespace rdv
