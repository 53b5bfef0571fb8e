#include "core/device_name.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdv {
namespace {

absl::Status BadName(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid device name '", Excerpt(name, 128), "': ", why));
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (const char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool ParseNumber(absl::string_view s, int* out) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(s, out);
}

// The parts of a name. TensorFlow accepts them in any order; each may
// appear once here (TensorFlow lets a repeated part overwrite the first).
enum class Part { kJob, kReplica, kTask, kDevice, kCount };

// A part's value "*" matches anything and leaves the part unset.
bool IsWildcard(absl::string_view value) { return value == "*"; }

class NameParser {
 public:
  explicit NameParser(absl::string_view name) : name_(name) {}

  absl::StatusOr<DeviceName> Parse() {
    if (name_.empty()) return out_;  // the empty specification: any device
    if (name_[0] != '/') return BadName(name_, "must start with '/'");
    const std::vector<absl::string_view> parts = absl::StrSplit(name_.substr(1), '/');
    for (const absl::string_view part : parts) {
      RDV_RETURN_IF_ERROR(ParsePart(part));
    }
    return out_;
  }

 private:
  absl::Status ParsePart(absl::string_view part) {
    if (absl::ConsumePrefix(&part, "job:")) {
      RDV_RETURN_IF_ERROR(See(Part::kJob, "job"));
      if (IsWildcard(part)) return absl::OkStatus();
      if (!IsIdentifier(part)) return BadName(name_, "job must be a letter then [A-Za-z0-9_]");
      out_.has_job = true;
      out_.job = std::string(part);
      return absl::OkStatus();
    }
    if (absl::ConsumePrefix(&part, "replica:")) {
      RDV_RETURN_IF_ERROR(See(Part::kReplica, "replica"));
      return ParseIndex(part, "replica", &out_.has_replica, &out_.replica);
    }
    if (absl::ConsumePrefix(&part, "task:")) {
      RDV_RETURN_IF_ERROR(See(Part::kTask, "task"));
      return ParseIndex(part, "task", &out_.has_task, &out_.task);
    }
    if (absl::ConsumePrefix(&part, "device:")) return ParseDevice(part, /*legacy=*/false);
    return ParseDevice(part, /*legacy=*/true);
  }

  // A number, or "*" for any.
  absl::Status ParseIndex(absl::string_view value, absl::string_view what, bool* has, int* out) {
    if (IsWildcard(value)) return absl::OkStatus();
    if (!ParseNumber(value, out)) return BadName(name_, absl::StrCat(what, " must be a number or *"));
    *has = true;
    return absl::OkStatus();
  }

  // "TYPE:N" after "device:", or the legacy "cpu:N" / "gpu:N"; TYPE and N
  // may be "*".
  absl::Status ParseDevice(absl::string_view part, bool legacy) {
    const size_t colon = part.rfind(':');
    if (legacy && colon == absl::string_view::npos) {
      return BadName(name_, absl::StrCat("unknown part '", Excerpt(part, 64), "'"));
    }
    RDV_RETURN_IF_ERROR(See(Part::kDevice, "device"));
    std::string type(part.substr(0, colon));
    if (legacy) {
      const std::string lower = absl::AsciiStrToLower(type);
      if (lower != "cpu" && lower != "gpu") {
        return BadName(name_, absl::StrCat("unknown part '", Excerpt(part, 64), "'"));
      }
      type = absl::AsciiStrToUpper(type);
    }
    if (type != "*") {
      if (!IsIdentifier(type)) return BadName(name_, "device type must be an identifier");
      out_.has_type = true;
      out_.type = std::move(type);
    }
    if (colon == absl::string_view::npos) return absl::OkStatus();
    return ParseIndex(part.substr(colon + 1), "device id", &out_.has_id, &out_.id);
  }

  absl::Status See(Part part, absl::string_view what) {
    bool& seen = seen_[static_cast<int>(part)];
    if (seen) return BadName(name_, absl::StrCat("'", what, "' appears twice"));
    seen = true;
    return absl::OkStatus();
  }

  absl::string_view name_;
  DeviceName out_;
  bool seen_[static_cast<int>(Part::kCount)] = {};
};

}  // namespace

bool IsValidJobName(absl::string_view name) { return IsIdentifier(name); }

absl::StatusOr<DeviceName> DeviceName::Parse(absl::string_view name) {
  return NameParser(name).Parse();
}

std::string DeviceName::ToString() const {
  std::string out = WorkerName();
  if (has_type) {
    absl::StrAppend(&out, "/device:", type);
    if (has_id) absl::StrAppend(&out, ":", id);
  }
  return out;
}

std::string DeviceName::WorkerName() const {
  std::string out;
  if (has_job) absl::StrAppend(&out, "/job:", job);
  if (has_replica) absl::StrAppend(&out, "/replica:", replica);
  if (has_task) absl::StrAppend(&out, "/task:", task);
  return out;
}

bool InSameAddressSpace(const DeviceName& a, const DeviceName& b) {
  return a.has_job && b.has_job && a.has_replica && b.has_replica && a.has_task && b.has_task &&
         a.job == b.job && a.replica == b.replica && a.task == b.task;
}

}  // namespace rdv
