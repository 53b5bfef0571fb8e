// Device names as TensorFlow spells them:
//   /job:worker/replica:0/task:1/device:GPU:0   (full)
//   /job:worker/task:1/cpu:0, /cpu:0, /device:GPU:1   (short and legacy)
// Parse accepts, as TensorFlow's parser does, partial specifications: any
// subset of the parts, in any order, "*" for any value (the part is then
// unset: "/job:*/device:GPU:*"), and the empty name (any device). Unlike
// TensorFlow, a part named twice is an error rather than the last one
// winning. ToString prints the parts present in the full spelling
// ("/job:J/replica:R/task:T/device:T:N").
// The job/replica/task prefix names the worker process.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "core/status.h"

namespace rdv {

struct DeviceName {
  bool has_job = false;
  std::string job;
  bool has_replica = false;
  int replica = 0;
  bool has_task = false;
  int task = 0;
  bool has_type = false;
  std::string type;  // "CPU", "GPU", ...; legacy lowercase cpu/gpu upper-cased
  bool has_id = false;
  int id = 0;

  // INVALID_ARGUMENT naming the name and the offending part.
  static absl::StatusOr<DeviceName> Parse(absl::string_view name);

  // Every part present: what a rendezvous key needs.
  bool IsFullySpecified() const { return has_job && has_replica && has_task && has_type && has_id; }

  std::string ToString() const;

  // "/job:J/replica:R/task:T": the worker process this device belongs to.
  std::string WorkerName() const;

  bool IsCpu() const { return has_type && type == "CPU"; }
  bool IsGpu() const { return has_type && type == "GPU"; }

  friend bool operator==(const DeviceName& a, const DeviceName& b) = default;
};

// A letter, then letters, digits and '_': what a job name may be.
bool IsValidJobName(absl::string_view name);

// True when both devices are fully named and belong to the same worker
// process (same job, replica and task), so that they share host memory.
bool InSameAddressSpace(const DeviceName& a, const DeviceName& b);

}  // namespace rdv
