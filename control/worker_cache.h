// gRPC channels to the other workers of the cluster, one per worker name,
// made on first use and shared by every step. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/container/flat_hash_map.h"
#include "control/cluster.h"
#include "control/options.h"
#include "control/release_batcher.h"
#include "control/worker.grpc.pb.h"

namespace rdv::control {

// The channel settings rdv uses to every peer: unlimited message sizes,
// keepalive pings that detect a dead peer within options.peer_timeout, fast
// reconnects. Benchmarks use the same settings for their raw gRPC reference.
grpc::ChannelArguments PeerChannelArguments(const ControlOptions& options);

struct WorkerClient {
  std::string worker_name;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<WorkerService::Stub> stub;
  // RecvTensor registered on the channel for calls whose response rdv
  // parses by hand (a registered method is cheaper per call than a generic
  // one: its path is interned once).
  std::unique_ptr<grpc::internal::RpcMethod> recv_tensor;
  std::shared_ptr<ReleaseBatcher> releases;
};

class WorkerCache {
 public:
  WorkerCache(ClusterSpec cluster, ControlOptions options);
  // Waits for the acks still in flight (bounded by the peer timeout).
  ~WorkerCache();

  // INVALID_ARGUMENT when the worker is not in the cluster.
  absl::StatusOr<std::shared_ptr<WorkerClient>> Get(absl::string_view worker_name);

  // Points the worker at a new address (a restarted or late-bound worker);
  // calls in flight keep their old channel.
  void SetAddress(absl::string_view job, int task, std::string address);

  ClusterSpec cluster() const;
  const ControlOptions& options() const { return options_; }

 private:
  const ControlOptions options_;
  mutable std::mutex mu_;
  ClusterSpec cluster_;  // guarded by mu_
  absl::flat_hash_map<std::string, std::shared_ptr<WorkerClient>> clients_;  // guarded by mu_
};

}  // namespace rdv::control
