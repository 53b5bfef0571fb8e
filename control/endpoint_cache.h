// The data plane's transport endpoints, one per peer transport address,
// made off the caller's thread. A connect may block: verbs dials the peer's
// listener and swaps queue-pair details over TCP (up to 5 s for a peer that
// does not answer), and the data plane is called on gRPC's callback threads,
// which must never wait. So a connect runs on this cache's connector thread,
// and whoever needs the endpoint is called back there.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "core/status.h"
#include "plugin/transport.h"

namespace rdv::control {

class EndpointCache {
 public:
  using Endpoint = std::shared_ptr<plugin::TransportEndpoint>;
  // Runs once, with the endpoint or why there is none. Must not block.
  using Ready = absl::AnyInvocable<void(absl::StatusOr<Endpoint>) &&>;

  explicit EndpointCache(std::shared_ptr<const plugin::Transport> transport);
  // Shuts down; endpoints go when their last user lets go of them.
  ~EndpointCache();
  EndpointCache(const EndpointCache&) = delete;
  EndpointCache& operator=(const EndpointCache&) = delete;

  // Calls `ready` with the endpoint to `address`: at once, on this thread,
  // when one is kept; else on the connector thread once a connect (one per
  // address, however many callers wait for it) has ended. Callers to one
  // address are called back in the order they called.
  void With(const std::string& address, Ready ready);
  // Drops the endpoint to `address`: a failed transfer may have left it out
  // of service (a verbs QP in the error state), so the next caller connects
  // anew. One still handing out a just-made endpoint is not kept, and
  // callers who come after the Forget wait for a new connect.
  void Forget(const std::string& address);
  // The peer at `address` is lost: its endpoint is aborted (what is in
  // flight on it ends at once) and dropped, and a connect in flight to it
  // ends UNAVAILABLE for its callers.
  void PeerLost(const std::string& address);
  // Aborts and drops every endpoint, fails every caller still waiting for a
  // connect with CANCELLED (on this thread), joins the connector, and from
  // then on fails every With at once: no callback runs on the connector
  // thread afterwards. For the worker's shutdown.
  void Shutdown();

 private:
  struct Pending {
    std::vector<Ready> waiting;
    bool peer_lost = false;
    // Forget came while this connect's callers were being called back: the
    // endpoint is not kept, and later callers wait in `after_forget`.
    bool forgotten = false;
    std::vector<Ready> after_forget;
  };
  void ConnectLoop();
  void Connect(const std::string& address);
  // With mu_ held, once a connect's callers are all called back: keeps the
  // endpoint, or connects anew for callers who came after a Forget.
  using PendingMap = absl::flat_hash_map<std::string, Pending>;
  void EndConnect(PendingMap::iterator it, absl::StatusOr<Endpoint> outcome);

  std::shared_ptr<const plugin::Transport> transport_;
  std::mutex mu_;
  std::condition_variable work_;
  bool stopping_ = false;                                      // mu_
  std::once_flag joined_;
  absl::flat_hash_map<std::string, Endpoint> endpoints_;       // mu_
  PendingMap pending_;                                         // mu_
  std::deque<std::string> queue_;                              // mu_: addresses to connect
  std::thread connector_;  // last: started once the rest exists
};

}  // namespace rdv::control
