// Names and numbers of rdv's control-plane protocol.
#pragma once

#include <cstdint>

namespace rdv::control {

// Exchanged in Handshake; bumped when a change is not backward compatible.
inline constexpr uint32_t kProtocolVersion = 2;

// The classic protocol: the payload travels inside RecvTensor's stream.
inline constexpr char kProtocolGrpc[] = "grpc";

inline constexpr char kRecvTensorMethod[] = "/rdv.control.WorkerService/RecvTensor";

}  // namespace rdv::control
