// What a producer keeps for a consumer (a transfer the consumer reads, a
// value it will fetch, a tagged send to it) goes when the consumer releases
// it, when its step is cleaned up, and, through a lease, when the consumer
// is lost: a consumer killed between the descriptor and its release would
// otherwise pin the tensor until the step's cleanup, which may never come.
//
// The consumer is the worker a rendezvous key names as its destination,
// watched through this worker's channel to it (control/peer_watch.h): lost
// means its connection dropped and it stopped answering, after it answered
// once. A destination that is this worker, or not a member of the cluster,
// or an address that never answered, is not watched: what is held for it
// goes with its release or its step only.
#pragma once

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "control/worker_cache.h"
#include "core/rendezvous_key.h"

namespace rdv::control {

// Alive while something is held for a consumer; null when not watched.
using ConsumerLease = std::shared_ptr<const void>;
// Runs at most once, on the watch's thread, when the consumer is lost. It
// may be running while its lease is dropped: it reaches what it lets go of
// through a weak reference.
using ConsumerLost = absl::AnyInvocable<void() &&>;

class ConsumerWatcher {
 public:
  // Watches nobody: every lease is null.
  ConsumerWatcher() = default;
  // Watches the consumer of `key` on behalf of the worker `self`. Cheap:
  // the consumer is looked up in `workers` (which must outlive this) only
  // when something is leased to it.
  ConsumerWatcher(WorkerCache& workers, const std::string& self, const ParsedKey& key);

  ConsumerLease Lease(ConsumerLost lost) const;

 private:
  WorkerCache* workers_ = nullptr;  // null: nobody to watch
  std::string consumer_;
};

}  // namespace rdv::control
