#include "control/cluster.h"

#include <fstream>
#include <sstream>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/device_name.h"

namespace rdv::control {
namespace {

absl::Status CheckAddress(absl::string_view job, absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster job '", job, "': address '", address, "' is not host:port"));
  }
  return absl::OkStatus();
}

absl::Status CheckJob(absl::string_view job) {
  if (!IsValidJobName(job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster job name '", job, "' must be a letter then [A-Za-z0-9_]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ClusterSpec::FromFlag(absl::string_view flag) {
  ClusterSpec spec;
  for (absl::string_view job_spec : absl::StrSplit(flag, ';', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(job_spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster '", flag, "': expected job=host:port,host:port[;job=...]"));
    }
    const absl::string_view job = absl::StripAsciiWhitespace(parts[0]);
    RDV_RETURN_IF_ERROR(CheckJob(job));
    auto& tasks = spec.jobs_[std::string(job)];
    for (absl::string_view address : absl::StrSplit(parts[1], ',')) {
      address = absl::StripAsciiWhitespace(address);
      RDV_RETURN_IF_ERROR(CheckAddress(job, address));
      tasks.emplace_back(address);
    }
  }
  if (spec.jobs_.empty()) return absl::InvalidArgumentError("cluster spec is empty");
  return spec;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(absl::string_view json) {
  google::protobuf::Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &parsed);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster JSON does not parse: ", status.ToString()));
  }
  ClusterSpec spec;
  for (const auto& [job, value] : parsed.fields()) {
    RDV_RETURN_IF_ERROR(CheckJob(job));
    if (!value.has_list_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster JSON: job '", job, "' must map to a list of \"host:port\""));
    }
    auto& tasks = spec.jobs_[job];
    for (const auto& address : value.list_value().values()) {
      if (!address.has_string_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster JSON: job '", job, "' has a task that is not a string"));
      }
      RDV_RETURN_IF_ERROR(CheckAddress(job, address.string_value()));
      tasks.push_back(address.string_value());
    }
  }
  if (spec.jobs_.empty()) return absl::InvalidArgumentError("cluster JSON has no jobs");
  return spec;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJsonFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read cluster file '", path, "'"));
  std::stringstream contents;
  contents << file.rdbuf();
  absl::StatusOr<ClusterSpec> spec = FromJson(contents.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

std::string ClusterSpec::WorkerName(absl::string_view job, int task) {
  return absl::StrCat("/job:", job, "/replica:0/task:", task);
}

absl::StatusOr<std::string> ClusterSpec::AddressOf(absl::string_view worker_name) const {
  absl::StatusOr<DeviceName> name = DeviceName::Parse(worker_name);
  if (!name.ok()) return name.status();
  if (name->has_replica && name->replica != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", worker_name, "': rdv clusters have only replica 0"));
  }
  const auto job = jobs_.find(name->job);
  if (!name->has_job || !name->has_task || job == jobs_.end() || name->task < 0 ||
      static_cast<size_t>(name->task) >= job->second.size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker '", worker_name,
                                                   "' is not in the cluster (", DebugString(), ")"));
  }
  return job->second[static_cast<size_t>(name->task)];
}

void ClusterSpec::SetAddress(absl::string_view job, int task, std::string address) {
  auto& tasks = jobs_[std::string(job)];
  if (tasks.size() <= static_cast<size_t>(task)) tasks.resize(static_cast<size_t>(task) + 1);
  tasks[static_cast<size_t>(task)] = std::move(address);
}

std::vector<std::string> ClusterSpec::WorkerNames() const {
  std::vector<std::string> names;
  for (const auto& [job, tasks] : jobs_) {
    for (size_t t = 0; t < tasks.size(); ++t) names.push_back(WorkerName(job, static_cast<int>(t)));
  }
  return names;
}

std::string ClusterSpec::DebugString() const {
  return absl::StrJoin(jobs_, ";", [](std::string* out, const auto& job) {
    absl::StrAppend(out, job.first, "=", absl::StrJoin(job.second, ","));
  });
}

}  // namespace rdv::control
