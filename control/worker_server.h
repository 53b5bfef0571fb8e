// A worker's gRPC server: the WorkerService every remote protocol uses
// (Handshake, RecvTensor, ReleaseTransfers, CleanupStep, AbortStep), the
// graph runner's RegisterGraph / RunGraph / CleanupGraph (graph/executor.h
// runs a partition on the step's rendezvous), and the DriverService when
// enabled. One per process; embeddable (rdv-worker runs
// one). Start binds and serves on gRPC's threads; the destructor shuts the
// server down and cleans up every step. Every RPC first passes the door of
// options.control.security (control/security.h): a caller that is not a
// member gets UNAUTHENTICATED.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "control/cluster.h"
#include "control/options.h"
#include "control/rendezvous_mgr.h"
#include "core/tensor.h"

namespace rdv::control {

class DataPlane;
class FastPath;
class WorkerCache;

// A default-constructed WorkerServerOptions reads no environment: start
// from FromEnvironment() to honour the RDV_* variables, as rdv-worker does.
struct WorkerServerOptions {
  std::string job = "worker";
  int task = 0;
  // host:port to listen on; port 0 picks a free port (see address()).
  std::string listen_address = "127.0.0.1:0";
  ClusterSpec cluster;
  ControlOptions control;
  // "grpc", or "grpc+<transport>" to move payloads through
  // librdv_transport_<transport>.so. A worker serves its own protocol and
  // grpc; asking for one it cannot load fails Start.
  std::string protocol = "grpc";
  // Serve DriverService: lets tests and benchmarks make this worker Send.
  bool enable_driver = false;
  // The data plane's settings (protocols other than grpc).
  DataPlaneOptions data_plane;

  // `defaults`, with `control` and `data_plane` overridden by the
  // environment (docs/configuration.md); INVALID_ARGUMENT naming a variable
  // that does not parse.
  static absl::StatusOr<WorkerServerOptions> FromEnvironment(WorkerServerOptions defaults);
  static absl::StatusOr<WorkerServerOptions> FromEnvironment();
};

class WorkerServer {
 public:
  // INVALID_ARGUMENT for bad options; FAILED_PRECONDITION for a listen
  // address reachable from other hosts without TLS and a token (unless
  // allow_insecure); UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(WorkerServerOptions options);
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  const std::string& worker_name() const;
  uint64_t incarnation() const;
  // The bound host:port (the real port when 0 was asked for).
  const std::string& address() const;
  RendezvousMgr& rendezvous_mgr();
  WorkerCache& worker_cache();
  // Points `job`/`task` at `address` (host:port) from now on: for peers
  // whose address is known only after they started (a store, a launcher).
  // Thread-safe; calls in flight keep the old channel.
  void SetPeerAddress(absl::string_view job, int task, std::string address);
  // Null for protocol grpc.
  DataPlane* data_plane();
  // DataPlane::AllocatePeerReadable; nullopt for protocol grpc. For an
  // embedder that stages a value to send (the torch backend).
  std::optional<Tensor> AllocatePeerReadable(DType dtype, const TensorShape& shape);
  // Recvs of known keys without RecvTensor; null when RDV_FAST_PATH=0 or
  // the transport carries no messages (control/fast_path.h).
  FastPath* fast_path();

  // What this worker moved since it started, in Prometheus' text format
  // (docs/stats.md); the same counters as the GetStats RPC.
  std::string StatsAsPrometheus() const;

  // Stops serving: calls in flight are cancelled; steps are cleaned up.
  void Shutdown();

 private:
  class Impl;
  explicit WorkerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdv::control
