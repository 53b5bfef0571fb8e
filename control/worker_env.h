// What every rendezvous of a worker shares: who the worker is and how to
// reach the others. Owned by WorkerServer; outlives every rendezvous.
#pragma once

#include <cstdint>
#include <string>

#include "control/data_plane.h"
#include "control/options.h"
#include "control/worker_cache.h"
#include "control/worker_stats.h"
#include "core/device_name.h"

namespace rdv::control {

class FastPath;

struct WorkerEnv {
  std::string worker_name;  // "/job:J/replica:0/task:T"
  DeviceName worker;        // the same, parsed
  uint64_t incarnation = 0;
  ControlOptions options;
  WorkerCache* worker_cache = nullptr;
  std::string protocol = "grpc";
  // The transport's data plane; null for protocol grpc.
  DataPlane* data_plane = nullptr;
  // Recvs of known keys without RecvTensor (control/fast_path.h); null
  // when RDV_FAST_PATH=0 or the data plane carries no messages.
  FastPath* fast_path = nullptr;
  // What this worker moved (control/worker_stats.h); never null.
  WorkerStats* stats = nullptr;
  // What this worker says of itself in a Handshake, as caller and as
  // answer: name, incarnation, protocol version, its data plane.
  HandshakeRequest handshake;
};

}  // namespace rdv::control
