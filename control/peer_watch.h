// Notices that a worker is lost while transfers from it are in flight on
// the data plane, which may not notice by itself (UCX's shared memory
// cannot; a tagged receive waits for its send forever): the worker's gRPC
// connection dropped (its socket closed, or keepalive pings went
// unanswered for the peer timeout) and a Handshake then gets no answer
// within half the peer timeout. Each watched transfer is then told, once.
//
// A worker is lost only once it was reached: its channel was ready or it
// answered a Handshake since it was last lost, or a caller heard from it
// (Watch). An address no one ever answered at (a placeholder in a cluster
// spec) is unreachable, not lost: its watches wait for their deadline.
//
// A thread per watched worker runs while something is watched, and a peer
// timeout longer (so that back-to-back transfers share it). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace rdv::control {

class PeerWatch {
 public:
  // Runs on the watch's thread: UNAVAILABLE naming the worker when it is
  // lost, DEADLINE_EXCEEDED when the watch's deadline passed first.
  using Lost = absl::AnyInvocable<void(const absl::Status&) &&>;

  // Whether a Recv of this worker waits for the watched transfer. A loss is
  // logged as a warning when one does. A loss that ends only unawaited ones
  // is logged at info: values read ahead that no Recv claimed, and what a
  // producer holds or sends for its consumer (a peer's clean exit may end
  // those: the value arrived, the send's completion did not). The status
  // each watch is told reports the loss either way.
  enum class Stake { kAwaited, kUnawaited };

  // `channel` leads to the worker `worker_name` at `address`.
  PeerWatch(std::shared_ptr<grpc::Channel> channel, std::string worker_name, std::string address,
            absl::Duration peer_timeout);
  // Stops the thread; what is still watched is not told.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // `lost` runs once if the worker is lost before Unwatch(id). It may be
  // running when Unwatch is called: the caller settles which came first.
  // The caller just heard from the worker (an answer over the channel).
  uint64_t Watch(Lost lost, Stake stake = Stake::kAwaited);
  // The same for a caller that has not heard from the worker itself (a
  // producer watching the consumer a key names, for which nothing here
  // waits: kUnawaited): `lost` runs only if the watch reached the worker
  // before it was lost.
  uint64_t WatchOnceAnswered(Lost lost);
  // Tells the watch `id` at `deadline` (within 100 ms) if it is still
  // watched then.
  void SetDeadline(uint64_t id, absl::Time deadline);
  void Unwatch(uint64_t id);
  // Whether something is watched and the worker was reached: a loss now
  // is told.
  bool WatchingReached() const;

 private:
  // The thread holds the state too: a lost callback may destroy this
  // watch (dropping the last reference to its owner) on that thread.
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace rdv::control
