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

// Order of the parts in a name; each may appear once, in this order.
enum class Part { kJob, kReplica, kTask, kDevice };

class NameParser {
 public:
  explicit NameParser(absl::string_view name) : name_(name) {}

  absl::StatusOr<DeviceName> Parse() {
    if (name_.empty()) return BadName(name_, "empty");
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
      RDV_RETURN_IF_ERROR(Advance(Part::kJob, "job"));
      if (!IsIdentifier(part)) return BadName(name_, "job must be a letter then [A-Za-z0-9_]");
      out_.has_job = true;
      out_.job = std::string(part);
      return absl::OkStatus();
    }
    if (absl::ConsumePrefix(&part, "replica:")) {
      RDV_RETURN_IF_ERROR(Advance(Part::kReplica, "replica"));
      if (!ParseNumber(part, &out_.replica)) return BadName(name_, "replica must be a number");
      out_.has_replica = true;
      return absl::OkStatus();
    }
    if (absl::ConsumePrefix(&part, "task:")) {
      RDV_RETURN_IF_ERROR(Advance(Part::kTask, "task"));
      if (!ParseNumber(part, &out_.task)) return BadName(name_, "task must be a number");
      out_.has_task = true;
      return absl::OkStatus();
    }
    if (absl::ConsumePrefix(&part, "device:")) return ParseDevice(part, /*legacy=*/false);
    return ParseDevice(part, /*legacy=*/true);
  }

  // "TYPE:N" after "device:", or the legacy "cpu:N" / "gpu:N".
  absl::Status ParseDevice(absl::string_view part, bool legacy) {
    RDV_RETURN_IF_ERROR(Advance(Part::kDevice, "device"));
    const size_t colon = part.rfind(':');
    if (colon == absl::string_view::npos) {
      if (legacy) return BadName(name_, absl::StrCat("unknown part '", Excerpt(part, 64), "'"));
      if (!IsIdentifier(part)) return BadName(name_, "device type must be an identifier");
      out_.has_type = true;
      out_.type = std::string(part);
      return absl::OkStatus();
    }
    std::string type(part.substr(0, colon));
    if (legacy) {
      const std::string lower = absl::AsciiStrToLower(type);
      if (lower != "cpu" && lower != "gpu") {
        return BadName(name_, absl::StrCat("unknown part '", Excerpt(part, 64), "'"));
      }
      type = absl::AsciiStrToUpper(type);
    }
    if (!IsIdentifier(type)) return BadName(name_, "device type must be an identifier");
    if (!ParseNumber(part.substr(colon + 1), &out_.id)) {
      return BadName(name_, "device id must be a number");
    }
    out_.has_type = true;
    out_.type = std::move(type);
    out_.has_id = true;
    return absl::OkStatus();
  }

  absl::Status Advance(Part part, absl::string_view what) {
    if (seen_any_ && part <= last_) {
      return BadName(name_, absl::StrCat("'", Excerpt(what, 64), "' repeated or out of order"));
    }
    seen_any_ = true;
    last_ = part;
    return absl::OkStatus();
  }

  absl::string_view name_;
  DeviceName out_;
  bool seen_any_ = false;
  Part last_ = Part::kJob;
};

}  // namespace

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
