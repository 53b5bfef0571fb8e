// Control-plane settings, with defaults, from RDV_* environment variables
// (docs/configuration.md).
#pragma once

#include <cstddef>

#include "absl/time/time.h"
#include "core/status.h"

namespace rdv::control {

struct ControlOptions {
  // A peer that does not answer keepalive pings (or cannot be connected
  // to) for this long fails the Recvs that wait on it with UNAVAILABLE.
  // RDV_PEER_TIMEOUT_MS.
  absl::Duration peer_timeout = absl::Seconds(5);
  // Payload bytes per RecvTensor stream message (protocol grpc).
  // RDV_GRPC_CHUNK_BYTES.
  size_t chunk_bytes = size_t{4} << 20;

  // Defaults overridden by the environment; INVALID_ARGUMENT naming the
  // variable when a value does not parse or is out of range.
  static absl::StatusOr<ControlOptions> FromEnvironment();
};

}  // namespace rdv::control
