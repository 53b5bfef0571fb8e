// Which worker listens where. A cluster maps job names to the host:port of
// each task; task T of job J is the worker "/job:J/replica:0/task:T".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/status.h"

namespace rdv::control {

class ClusterSpec {
 public:
  ClusterSpec() = default;

  // "worker=h:p,h:p" with jobs separated by ';' ("worker=h:p;ps=h:p").
  static absl::StatusOr<ClusterSpec> FromFlag(absl::string_view flag);
  // {"worker": ["h:p", "h:p"], "ps": ["h:p"]}
  static absl::StatusOr<ClusterSpec> FromJson(absl::string_view json);
  static absl::StatusOr<ClusterSpec> FromJsonFile(const std::string& path);

  static std::string WorkerName(absl::string_view job, int task);

  // INVALID_ARGUMENT when `worker_name` ("/job:J/replica:0/task:T") is not
  // in the cluster.
  absl::StatusOr<std::string> AddressOf(absl::string_view worker_name) const;
  // Adds the job or task when missing.
  void SetAddress(absl::string_view job, int task, std::string address);
  std::vector<std::string> WorkerNames() const;
  std::string DebugString() const;

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> jobs_;
};

}  // namespace rdv::control
