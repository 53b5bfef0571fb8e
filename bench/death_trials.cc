#include "bench/death_trials.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace rdv::bench {
namespace {

int64_t ProcField(const std::string& file, const char* field) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::strtoll(line.c_str() + std::strlen(field), nullptr, 10);
    }
  }
  return -1;
}

}  // namespace

std::string Quantiles(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms.empty() ? 0.0 : ms[static_cast<size_t>(q * (ms.size() - 1))]; };
  return absl::StrFormat("%.0f / %.0f / %.0f", at(0.5), at(0.9), at(1.0));
}

Footprint MeasureFootprint(pid_t pid) {
  const std::string proc = pid == 0 ? "/proc/self" : "/proc/" + std::to_string(pid);
  Footprint footprint;
  std::error_code error;
  for (std::filesystem::directory_iterator it(proc + "/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++footprint.fds;
  }
  if (error) footprint.fds = -1;
  footprint.threads = static_cast<int>(ProcField(proc + "/status", "Threads:"));
  footprint.pss_kib = ProcField(proc + "/smaps_rollup", "Pss:");
  return footprint;
}

}  // namespace rdv::bench
