// gRPC channels to the other workers of the cluster, one per worker name,
// made on first use and shared by every step. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/container/flat_hash_map.h"
#include "control/cluster.h"
#include "control/fast_keys.h"
#include "control/options.h"
#include "control/peer_watch.h"
#include "control/release_batcher.h"
#include "rdv/control/worker.grpc.pb.h"

namespace rdv::control {

// The channel settings rdv uses to every peer: unlimited message sizes,
// keepalive pings that detect a dead peer within options.peer_timeout, fast
// reconnects. Benchmarks use the same settings for their raw gRPC reference.
grpc::ChannelArguments PeerChannelArguments(const ControlOptions& options);

// Calls that run on gRPC's threads and hold a WorkerClient. The cache
// waits for them before it lets its channels go, so that no channel is
// released on gRPC's own callback thread: gRPC 1.51 then stops its callback
// threads from one of them and frees their queue twice (grpc/grpc#32584).
class CallsInFlight {
 public:
  void Begin();
  void End();
  // False when calls remain after `timeout`.
  bool WaitForNone(absl::Duration timeout);
  bool None();

 private:
  std::mutex mu_;
  std::condition_variable none_;
  int count_ = 0;  // guarded by mu_
};

// Counts one call (or anything else that holds a WorkerClient) for as
// long as it lives. Declared before the holder's WorkerClient reference,
// it ends the count after that reference is gone: the cache, which waits
// for the count, then holds the last reference, and the client (its
// channel, its watch) never goes on gRPC's, a transport's or the watch's
// own thread.
class CountedCall {
 public:
  explicit CountedCall(std::shared_ptr<CallsInFlight> calls) : calls_(std::move(calls)) {
    calls_->Begin();
  }
  ~CountedCall() { calls_->End(); }
  CountedCall(const CountedCall&) = delete;
  CountedCall& operator=(const CountedCall&) = delete;

 private:
  const std::shared_ptr<CallsInFlight> calls_;
};

struct WorkerClient {
  std::string worker_name;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<WorkerService::Stub> stub;
  // RecvTensor registered on the channel for calls whose response rdv
  // parses by hand (a registered method is cheaper per call than a generic
  // one: its path is interned once).
  std::unique_ptr<grpc::internal::RpcMethod> recv_tensor;
  // The same method read as one message (RecvTensorRequest.single_message).
  std::unique_ptr<grpc::internal::RpcMethod> recv_tensor_one_message;
  std::shared_ptr<ReleaseBatcher> releases;
  // The largest tensor accepted from this worker (RDV_MAX_TENSOR_BYTES).
  uint64_t max_tensor_bytes = 0;
  // How long this worker may be silent before it counts as lost
  // (RDV_PEER_TIMEOUT_MS).
  absl::Duration peer_timeout;
  // A call that holds this client Begins here when it starts and Ends only
  // after it dropped its reference.
  std::shared_ptr<CallsInFlight> calls = std::make_shared<CallsInFlight>();
  // How this worker moves payloads to us (TransferOp), from its Handshake
  // (control/peer_handshake.h); TRANSFER_OP_UNSPECIFIED until it answered.
  std::atomic<int> transfer_op{TRANSFER_OP_UNSPECIFIED};
  std::atomic<bool> handshake_started{false};
  // The keys this worker gave us fast-path ids for (control/fast_keys.h).
  FastKeys fast_keys;
  // Bounds data-plane transfers from this worker by its life. Last: its
  // thread uses the channel.
  std::unique_ptr<PeerWatch> watch;
};

class WorkerCache {
 public:
  WorkerCache(ClusterSpec cluster, ControlOptions options);
  // Waits for the acks and calls still in flight (each wait bounded by the
  // peer timeout), then lets the channels go on this thread.
  ~WorkerCache();

  // INVALID_ARGUMENT when the worker is not in the cluster.
  absl::StatusOr<std::shared_ptr<WorkerClient>> Get(absl::string_view worker_name);

  // Points the worker at a new address (a restarted or late-bound worker);
  // calls in flight keep their old channel.
  void SetAddress(absl::string_view job, int task, std::string address);

  // The clients made so far (not the retired ones).
  std::vector<std::shared_ptr<WorkerClient>> Clients() const;
  ClusterSpec cluster() const;
  const ControlOptions& options() const { return options_; }

 private:
  const ControlOptions options_;
  mutable std::mutex mu_;
  ClusterSpec cluster_;  // guarded by mu_
  absl::flat_hash_map<std::string, std::shared_ptr<WorkerClient>> clients_;  // guarded by mu_
  // Clients replaced by SetAddress, kept while anything still uses them (a
  // restarted peer replaces its client on every restart).
  std::vector<std::shared_ptr<WorkerClient>> retired_;  // guarded by mu_
};

}  // namespace rdv::control
