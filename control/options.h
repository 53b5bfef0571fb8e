// Control-plane settings, with defaults, from RDV_* environment variables
// (docs/configuration.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/time/time.h"
#include "control/security_options.h"
#include "core/status.h"

namespace rdv::control {

// The largest RDV_GRPC_CHUNK_BYTES, and with it the largest message a
// worker reads from a producer (plus the meta); gRPC's own ceiling is 2 GiB.
inline constexpr size_t kMaxGrpcChunkBytes = size_t{1} << 30;
// The largest request a worker reads (a graph, RunGraph's feeds, a batch of
// releases); a larger one is refused with RESOURCE_EXHAUSTED before it is
// parsed.
inline constexpr int kMaxRequestBytes = 64 << 20;

struct ControlOptions {
  // A peer that does not answer keepalive pings (or cannot be connected
  // to) for this long fails the Recvs that wait on it with UNAVAILABLE.
  // RDV_PEER_TIMEOUT_MS.
  absl::Duration peer_timeout = absl::Seconds(5);
  // Payload bytes per RecvTensor stream message (protocol grpc).
  // RDV_GRPC_CHUNK_BYTES.
  size_t chunk_bytes = size_t{4} << 20;
  // The largest tensor this worker accepts from a peer: a RecvTensor answer
  // that declares more is refused (RESOURCE_EXHAUSTED) before anything is
  // allocated for it. RDV_MAX_TENSOR_BYTES.
  uint64_t max_tensor_bytes = uint64_t{64} << 30;
  // How long a worker asked to stop (SIGTERM, SIGINT) may take: past it,
  // rdv-worker says so and exits with status 1, whatever is still stuck.
  // RDV_SHUTDOWN_TIMEOUT_MS.
  absl::Duration shutdown_timeout = absl::Seconds(10);
  // Mutual TLS and the cluster token (control/security.h); none by default.
  SecurityOptions security;
  // A Recv of a key this worker received from the same producer before asks
  // for it through the data plane's messages, with no RecvTensor call
  // (control/fast_path.h). Needs a transport that carries messages on both
  // sides; others keep to RecvTensor. RDV_FAST_PATH (0 or 1).
  bool fast_path = true;
  // This worker, as a producer, answers fast requests by writing into the
  // consumer's destination (the fast path's design B) also where its
  // transport sends tagged (UCX over shared memory or tcp), to compare the
  // two designs (docs/fast_path.md). Producers that read (verbs, UCX over
  // RDMA) always write. RDV_FAST_PATH_WRITES (0 or 1).
  bool fast_path_writes = false;
  // This worker, as a producer whose transport is read from (op get),
  // answers fast requests by holding the value and telling the consumer
  // where to read it (design D), which then releases it, instead of
  // writing it. Made for UCX's mapped pool over shared memory
  // (RDV_UCX_MEMORY=mapped, RDV_UCX_OP=get), where the read is one copy.
  // RDV_FAST_PATH_READS (0 or 1).
  bool fast_path_reads = false;
  // From a key's second fast Recv in a step on, this worker asks for the key's
  // next values before their Recvs, up to this many bytes of them (and at
  // most ReadAhead::kMaxValues), and a Recv finds its value here
  // (control/read_ahead.h). Costs that much memory per key received so, in
  // the step. 0 turns it off. RDV_READ_AHEAD_BYTES.
  size_t read_ahead_bytes = size_t{4} << 20;

  // `defaults` overridden by the environment; INVALID_ARGUMENT naming the
  // variable when a value does not parse or is out of range.
  static absl::StatusOr<ControlOptions> FromEnvironment(ControlOptions defaults);
  static absl::StatusOr<ControlOptions> FromEnvironment();
};

// The data plane's settings, for protocols grpc+<transport>
// (control/data_plane.h).
struct DataPlaneOptions {
  // Tensors up to this many bytes ride in the RecvTensor answer: a key's
  // first value of up to 64 KiB arrives sooner there than by a descriptor
  // and the data plane (docs/fast_path.md). RDV_INLINE_BYTES.
  size_t inline_bytes = size_t{64} << 10;
  // Free transport memory kept for reuse. RDV_POOL_CACHE_BYTES.
  size_t pool_cache_bytes = size_t{1} << 30;
  // Registrations of foreign buffers kept. RDV_REGISTRATION_CACHE_BYTES.
  size_t registration_cache_bytes = size_t{4} << 30;
  // The transport plugin's settings, by the names it lists
  // (docs/configuration.md). One left out is read from its variable
  // (RDV_UCX_OP, UCX_TLS, RDV_IB_DEVICE...) when the plugin loads.
  std::map<std::string, std::string> transport_settings;

  // `defaults` overridden by the environment, as ControlOptions'.
  static absl::StatusOr<DataPlaneOptions> FromEnvironment(DataPlaneOptions defaults);
  static absl::StatusOr<DataPlaneOptions> FromEnvironment();
};

}  // namespace rdv::control
