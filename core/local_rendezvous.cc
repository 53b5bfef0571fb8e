#include "core/local_rendezvous.h"

#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace rdv {

// One buffered value or one waiting Recv.
struct LocalRendezvous::Item {
  std::unique_ptr<Item> next;
  RendezvousArgs args;
  // A value:
  Tensor value;
  bool is_dead = false;
  // A waiter:
  uint64_t waiter_id = 0;
  CancellationManager::Token cancel_token = 0;
  RecvDoneCallback done;

  // Makes sure that a cancellation callback no longer runs (or has
  // finished) before the waiter completes, so that the caller may then free
  // its manager.
  void DeregisterCancellation() const {
    if (args.cancellation_manager != nullptr) {
      args.cancellation_manager->DeregisterCallback(cancel_token);
    }
  }
};

// A FIFO of items, all values or all waiters.
struct LocalRendezvous::Channel {
  std::unique_ptr<Item> head;
  Item* tail = nullptr;
  bool holds_waiters = false;

  Channel() = default;
  Channel(Channel&&) = default;
  Channel& operator=(Channel&&) = default;
  ~Channel() {
    // Iterative, so that a long queue does not recurse through unique_ptrs.
    while (head) PopFront();
  }

  bool empty() const { return head == nullptr; }

  void PushBack(std::unique_ptr<Item> item) {
    Item* raw = item.get();
    if (tail == nullptr) {
      head = std::move(item);
    } else {
      tail->next = std::move(item);
    }
    tail = raw;
  }

  std::unique_ptr<Item> PopFront() {
    std::unique_ptr<Item> item = std::move(head);
    head = std::move(item->next);
    if (head == nullptr) tail = nullptr;
    return item;
  }

  std::unique_ptr<Item> RemoveWaiter(uint64_t id) {
    Item* previous = nullptr;
    for (std::unique_ptr<Item>* link = &head; *link != nullptr; link = &(*link)->next) {
      if ((*link)->waiter_id == id) {
        std::unique_ptr<Item> item = std::move(*link);
        *link = std::move(item->next);
        if (tail == item.get()) tail = previous;
        return item;
      }
      previous = link->get();
    }
    return nullptr;
  }

  size_t size() const {
    size_t n = 0;
    for (const Item* item = head.get(); item != nullptr; item = item->next.get()) ++n;
    return n;
  }
};

// Cache-line aligned so that neighbouring shards do not share a line.
// (std::mutex rather than absl::Mutex: see core/notification.h.)
struct alignas(64) LocalRendezvous::Shard {
  mutable std::mutex mu;
  absl::flat_hash_map<std::string, Channel> table;  // guarded by mu
};

LocalRendezvous::LocalRendezvous(int num_shards)
    : num_shards_(num_shards > 0 ? static_cast<size_t>(num_shards) : 1),
      shards_(new Shard[num_shards_]) {}

LocalRendezvous::~LocalRendezvous() {
  StartAbort(absl::CancelledError("rendezvous destroyed"));
}

LocalRendezvous::Shard& LocalRendezvous::ShardFor(absl::string_view key) const {
  return shards_[absl::Hash<absl::string_view>{}(key) % num_shards_];
}

absl::Status LocalRendezvous::AbortStatus() const {
  if (!aborted_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard lock(abort_mu_);
  return abort_status_;
}

absl::Status LocalRendezvous::Send(const ParsedKey& key, const RendezvousArgs& args,
                                   const Tensor& value, bool is_dead) {
  Shard& shard = ShardFor(key.FullKey());
  std::unique_ptr<Item> waiter;
  {
    std::lock_guard lock(shard.mu);
    // Checked under the shard lock: StartAbort sweeps each shard after
    // setting the flag, so a value buffered here is never left behind.
    RDV_RETURN_IF_ERROR(AbortStatus());
    auto it = shard.table.find(key.FullKey());
    if (it == shard.table.end() || !it->second.holds_waiters) {
      if (it == shard.table.end()) it = shard.table.try_emplace(key.FullKey()).first;
      auto item = std::make_unique<Item>();
      item->args = args;
      item->value = value;
      item->is_dead = is_dead;
      it->second.PushBack(std::move(item));
      return absl::OkStatus();
    }
    waiter = it->second.PopFront();
    if (it->second.empty()) shard.table.erase(it);
  }
  waiter->DeregisterCancellation();
  std::move(waiter->done)(absl::OkStatus(), args, waiter->args, value, is_dead);
  return absl::OkStatus();
}

void LocalRendezvous::RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                                RecvDoneCallback done) {
  Shard& shard = ShardFor(key.FullKey());
  std::unique_ptr<Item> value;
  absl::Status status;
  {
    std::lock_guard lock(shard.mu);
    status = AbortStatus();
    auto it = status.ok() ? shard.table.find(key.FullKey()) : shard.table.end();
    if (it != shard.table.end() && !it->second.holds_waiters) {
      value = it->second.PopFront();
      if (it->second.empty()) shard.table.erase(it);
    } else if (status.ok()) {
      auto waiter = std::make_unique<Item>();
      waiter->args = args;
      waiter->done = std::move(done);
      waiter->waiter_id = next_waiter_id_.fetch_add(1, std::memory_order_relaxed);
      CancellationManager* const cancel = args.cancellation_manager;
      if (cancel != nullptr) waiter->cancel_token = cancel->NewToken();
      if (cancel != nullptr &&
          !cancel->RegisterCallback(waiter->cancel_token,
                                    [this, key = std::string(key.FullKey()),
                                     id = waiter->waiter_id] { CancelWaiter(key, id); })) {
        done = std::move(waiter->done);
        status = RecvCancelledError(key.FullKey());
      } else {
        if (it == shard.table.end()) it = shard.table.try_emplace(key.FullKey()).first;
        it->second.holds_waiters = true;
        it->second.PushBack(std::move(waiter));
        return;
      }
    }
  }
  if (value != nullptr) {
    std::move(done)(absl::OkStatus(), value->args, args, value->value, value->is_dead);
  } else {
    std::move(done)(status, RendezvousArgs{}, args, Tensor(), false);
  }
}

void LocalRendezvous::CancelWaiter(const std::string& key, uint64_t id) {
  Shard& shard = ShardFor(key);
  std::unique_ptr<Item> waiter;
  {
    std::lock_guard lock(shard.mu);
    auto it = shard.table.find(key);
    if (it == shard.table.end() || !it->second.holds_waiters) return;
    waiter = it->second.RemoveWaiter(id);
    if (waiter == nullptr) return;
    if (it->second.empty()) shard.table.erase(it);
  }
  std::move(waiter->done)(RecvCancelledError(key),
                          RendezvousArgs{}, waiter->args, Tensor(), false);
}

void LocalRendezvous::StartAbort(const absl::Status& status) {
  const absl::Status abort_status =
      status.ok() ? absl::AbortedError("rendezvous aborted with an OK status") : status;
  {
    std::lock_guard lock(abort_mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    abort_status_ = abort_status;
    aborted_.store(true, std::memory_order_release);
  }
  for (size_t i = 0; i < num_shards_; ++i) {
    absl::flat_hash_map<std::string, Channel> table;
    {
      std::lock_guard lock(shards_[i].mu);
      table.swap(shards_[i].table);
    }
    for (auto& [key, channel] : table) {
      if (!channel.holds_waiters) continue;
      while (!channel.empty()) {
        std::unique_ptr<Item> waiter = channel.PopFront();
        waiter->DeregisterCancellation();
        std::move(waiter->done)(abort_status, RendezvousArgs{}, waiter->args, Tensor(), false);
      }
    }
  }
}

LocalRendezvous::Pending LocalRendezvous::CountPending() const {
  Pending pending;
  for (size_t i = 0; i < num_shards_; ++i) {
    std::lock_guard lock(shards_[i].mu);
    for (const auto& [key, channel] : shards_[i].table) {
      (channel.holds_waiters ? pending.waiters : pending.values) += channel.size();
    }
  }
  return pending;
}

}  // namespace rdv
