// What a producer keeps for its consumers, each entry under a key with its
// consumer's lease (control/consumer_lease.h): an entry goes when it is
// taken, when it is dropped, or when its consumer is lost. Thread-safe.
//
// Entries leave the table before they are destroyed, after its lock is
// released: a lease's destruction may join a watch's thread, whose
// callbacks take that lock.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "control/consumer_lease.h"

namespace rdv::control {

template <typename Key, typename Entry>
class LeasedTable {
 public:
  LeasedTable() : table_(std::make_shared<Table>()) {}

  // Keeps `entry` under `key` (replacing what was there) until it is taken
  // or dropped, or `consumer` says its consumer is lost.
  void Insert(const Key& key, Entry entry, const ConsumerWatcher& consumer) {
    std::optional<Leased> replaced = table_->Put(key, Leased{std::move(entry), nullptr});
    ConsumerLease lease = consumer.Lease([weak = std::weak_ptr<Table>(table_), key]() {
      if (std::shared_ptr<Table> table = weak.lock()) table->Remove(key, nullptr);
    });
    std::lock_guard lock(table_->mu);
    // Already taken (or its consumer already lost): `lease` goes with this
    // scope, after the lock.
    if (auto it = table_->entries.find(key); it != table_->entries.end()) {
      it->second.lease.swap(lease);
    }
  }

  // The entry under `key`, taken out; nullopt when there is none, or when
  // `matches` says it is not the one asked for (it then stays).
  std::optional<Entry> Take(const Key& key,
                            absl::FunctionRef<bool(const Entry&)> matches = Any) {
    std::optional<Leased> taken = table_->Remove(key, &matches);
    if (!taken.has_value()) return std::nullopt;
    return std::move(taken->entry);
  }

  void DropIf(absl::FunctionRef<bool(const Key&, const Entry&)> drop) {
    std::vector<Leased> dropped;
    std::lock_guard lock(table_->mu);
    for (auto it = table_->entries.begin(); it != table_->entries.end();) {
      if (!drop(it->first, it->second.entry)) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(it->second));
      table_->entries.erase(it++);
    }
  }

  void Clear() {
    absl::flat_hash_map<Key, Leased> dropped;
    std::lock_guard lock(table_->mu);
    dropped.swap(table_->entries);
  }

  size_t size() const {
    std::lock_guard lock(table_->mu);
    return table_->entries.size();
  }

 private:
  struct Leased {
    Entry entry;
    ConsumerLease lease;
  };
  // Shared with the leases' callbacks, which may outlive the table.
  struct Table {
    std::optional<Leased> Put(const Key& key, Leased leased) {
      std::lock_guard lock(mu);
      std::optional<Leased> replaced;
      if (auto it = entries.find(key); it != entries.end()) replaced = std::move(it->second);
      entries.insert_or_assign(key, std::move(leased));
      return replaced;
    }
    std::optional<Leased> Remove(const Key& key,
                                 const absl::FunctionRef<bool(const Entry&)>* matches) {
      std::lock_guard lock(mu);
      auto it = entries.find(key);
      if (it == entries.end() || (matches != nullptr && !(*matches)(it->second.entry))) {
        return std::nullopt;
      }
      std::optional<Leased> removed = std::move(it->second);
      entries.erase(it);
      return removed;
    }

    mutable std::mutex mu;
    absl::flat_hash_map<Key, Leased> entries;  // mu
  };

  static bool Any(const Entry&) { return true; }

  const std::shared_ptr<Table> table_;
};

}  // namespace rdv::control
