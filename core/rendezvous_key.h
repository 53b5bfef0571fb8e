// Rendezvous keys, byte-compatible with TensorFlow's Rendezvous::CreateKey
// and ParseKey:
//   src_device;src_incarnation;dst_device;name;frame_id:iter_id
// e.g. /job:w/replica:0/task:0/device:GPU:0;0000000000000001;
//      /job:w/replica:0/task:1/device:CPU:0;edge_5_foo;0:0
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "core/device_name.h"
#include "core/status.h"

namespace rdv {

struct FrameAndIter {
  int64_t frame_id = 0;
  int64_t iter_id = 0;
};

// An incarnation as keys print it: 16 lowercase, zero-padded hex digits.
std::string FormatIncarnation(uint64_t incarnation);

std::string CreateRendezvousKey(absl::string_view src_device, uint64_t src_incarnation,
                                absl::string_view dst_device, absl::string_view name,
                                FrameAndIter frame_iter = {});

// The longest key Parse accepts. TensorFlow's keys are two device names, a
// tensor name and a frame; a longer one is a mistake or an attack, and
// refusing it keeps what a peer can make a worker hold small.
inline constexpr size_t kMaxKeyBytes = 4096;

// A validated key. It owns a copy of the key string; the string_view
// accessors point into that copy and stay valid as long as this object (and
// its copies, which hold their own string) live.
class ParsedKey {
 public:
  // INVALID_ARGUMENT "Invalid rendezvous key '<key>': <why>" (the key cut to
  // an Excerpt) unless the key has at most kMaxKeyBytes, exactly five
  // ';'-separated parts, full device names in parts 0 and 2, 1 to 16 hex
  // digits in part 1, and non-empty parts 3 and 4.
  static absl::StatusOr<ParsedKey> Parse(absl::string_view key);

  absl::string_view FullKey() const { return key_; }
  absl::string_view src_device() const { return Part(src_device_); }
  uint64_t src_incarnation() const { return src_incarnation_; }
  absl::string_view dst_device() const { return Part(dst_device_); }
  absl::string_view tensor_name() const { return Part(tensor_name_); }
  absl::string_view frame_iter() const { return Part(frame_iter_); }
  // Part 3, the name alone, as TensorFlow's ParsedKey::edge_name (the
  // frame:iter part is not in it).
  absl::string_view edge_name() const { return tensor_name(); }
  const DeviceName& src() const { return src_; }
  const DeviceName& dst() const { return dst_; }

 private:
  struct Span {
    size_t pos = 0;
    size_t len = 0;
  };
  absl::string_view Part(Span s) const { return absl::string_view(key_).substr(s.pos, s.len); }

  std::string key_;
  Span src_device_, dst_device_, tensor_name_, frame_iter_;
  uint64_t src_incarnation_ = 0;
  DeviceName src_, dst_;
};

}  // namespace rdv
