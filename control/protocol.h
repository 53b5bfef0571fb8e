// Names and numbers of rdv's control-plane protocol.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rdv::control {

// Exchanged in Handshake, and carried by every RecvTensor request and
// answer; bumped when a change is not backward compatible. 3: RecvTensor
// checks it (a worker of version 2 or older sends none, read as 0).
inline constexpr uint32_t kProtocolVersion = 3;

// The message when `peer` speaks protocol version `theirs` to `me`.
inline std::string VersionMismatch(absl::string_view peer, uint32_t theirs, absl::string_view me) {
  return absl::StrCat(peer, " speaks rdv protocol version ",
                      theirs == 0 ? std::string("2 or older") : absl::StrCat(theirs), "; ", me,
                      " speaks ", kProtocolVersion, ": run one rdv release on every worker");
}

// The classic protocol: the payload travels inside RecvTensor's stream.
inline constexpr char kProtocolGrpc[] = "grpc";

inline constexpr char kRecvTensorMethod[] = "/rdv.control.WorkerService/RecvTensor";

}  // namespace rdv::control
