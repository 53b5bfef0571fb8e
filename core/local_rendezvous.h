// The in-memory table of channels behind every rendezvous. Keys hash to one
// of several shards, each with its own lock, so unrelated keys do not
// contend. Tensors pass through untouched: the Recv gets the very Tensor
// that was sent (same buffer).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/string_view.h"
#include "core/rendezvous.h"

namespace rdv {

class LocalRendezvous final : public Rendezvous {
 public:
  static constexpr int kDefaultShards = 256;

  explicit LocalRendezvous(int num_shards = kDefaultShards);
  // Waiting Recvs complete with CANCELLED "rendezvous destroyed"
  // (TensorFlow: CANCELLED "LocalRendezvousImpl deleted").
  ~LocalRendezvous() override;
  LocalRendezvous(const LocalRendezvous&) = delete;
  LocalRendezvous& operator=(const LocalRendezvous&) = delete;

  absl::Status Send(const ParsedKey& key, const RendezvousArgs& args, const Tensor& value,
                    bool is_dead) override;
  void RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                 RecvDoneCallback done) override;
  void StartAbort(const absl::Status& status) override;

  struct Pending {
    size_t values = 0;   // sent, not yet received
    size_t waiters = 0;  // receiving, nothing sent yet
  };
  // A snapshot across all shards, for tests and diagnostics.
  Pending CountPending() const;

 private:
  struct Item;
  struct Channel;
  struct Shard;

  Shard& ShardFor(absl::string_view key) const;
  // The abort status, or OK. Cheap while not aborted.
  absl::Status AbortStatus() const;
  // Removes the waiter `id` from `key`'s channel and fails it with
  // CANCELLED; does nothing when a Send already took it.
  void CancelWaiter(const std::string& key, uint64_t id);

  const size_t num_shards_;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  absl::Status abort_status_;  // guarded by abort_mu_
  std::atomic<uint64_t> next_waiter_id_{1};
};

}  // namespace rdv
