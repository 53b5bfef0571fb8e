#include "core/rendezvous_key.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rdv {
namespace {

constexpr int kKeyParts = 5;

absl::Status BadKey(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("Invalid rendezvous key '", Excerpt(key), "': ", why));
}

bool ParseHex(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t value = 0;
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!absl::ascii_isxdigit(u)) return false;
    const int digit = absl::ascii_isdigit(u) ? c - '0' : absl::ascii_tolower(u) - 'a' + 10;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  *out = value;
  return true;
}

absl::StatusOr<DeviceName> ParseKeyDevice(absl::string_view key, absl::string_view device,
                                          absl::string_view which) {
  absl::StatusOr<DeviceName> name = DeviceName::Parse(device);
  if (!name.ok()) return BadKey(key, name.status().message());
  if (!name->IsFullySpecified()) {
    return BadKey(key, absl::StrCat(which, " device '", Excerpt(device, 128),
                                    "' must name job, replica, task, type and id"));
  }
  return name;
}

}  // namespace

std::string FormatIncarnation(uint64_t incarnation) {
  return absl::StrCat(absl::Hex(incarnation, absl::kZeroPad16));
}

std::string CreateRendezvousKey(absl::string_view src_device, uint64_t src_incarnation,
                                absl::string_view dst_device, absl::string_view name,
                                FrameAndIter frame_iter) {
  return absl::StrCat(src_device, ";", FormatIncarnation(src_incarnation), ";",
                      dst_device, ";", name, ";", frame_iter.frame_id, ":", frame_iter.iter_id);
}

absl::StatusOr<ParsedKey> ParsedKey::Parse(absl::string_view key) {
  if (key.size() > kMaxKeyBytes) {
    return BadKey(key, absl::StrCat("it has ", key.size(), " bytes; the most rdv accepts is ",
                                    kMaxKeyBytes));
  }
  ParsedKey out;
  out.key_ = std::string(key);
  std::array<Span, kKeyParts> parts;
  size_t start = 0;
  for (int i = 0; i < kKeyParts; ++i) {
    const size_t end = i + 1 < kKeyParts ? key.find(';', start) : key.size();
    if (end == absl::string_view::npos) {
      return BadKey(key, absl::StrCat("expected 5 ';'-separated parts, found ", i + 1));
    }
    parts[static_cast<size_t>(i)] = Span{start, end - start};
    start = end + 1;
  }
  if (out.Part(parts[4]).find(';') != absl::string_view::npos) {
    return BadKey(key, "expected 5 ';'-separated parts, found more");
  }
  out.src_device_ = parts[0];
  out.dst_device_ = parts[2];
  out.tensor_name_ = parts[3];
  out.frame_iter_ = parts[4];
  RDV_ASSIGN_OR_RETURN(out.src_, ParseKeyDevice(key, out.src_device(), "source"));
  RDV_ASSIGN_OR_RETURN(out.dst_, ParseKeyDevice(key, out.dst_device(), "destination"));
  if (!ParseHex(out.Part(parts[1]), &out.src_incarnation_)) {
    return BadKey(key, "the incarnation must be 1 to 16 hex digits");
  }
  if (out.tensor_name().empty()) return BadKey(key, "the tensor name is empty");
  if (out.frame_iter().empty()) return BadKey(key, "the frame:iter part is empty");
  return out;
}

}  // namespace rdv
