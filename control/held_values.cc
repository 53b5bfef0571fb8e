#include "control/held_values.h"

#include <vector>

namespace rdv::control {

// What leaves the table is destroyed after its lock is released: a lease's
// destruction may join a watch's thread, whose callbacks take that lock.
HeldValues::HeldValues() : table_(std::make_shared<Table>()) {}

void HeldValues::Hold(int64_t step_id, int64_t request_id, Value value,
                      const ConsumerWatcher& consumer) {
  const Id id{step_id, request_id};
  {
    std::lock_guard lock(table_->mu);
    table_->held.insert_or_assign(id, Held{std::move(value), nullptr});
  }
  ConsumerLease lease = consumer.Lease([weak = std::weak_ptr<Table>(table_), id]() {
    if (std::shared_ptr<Table> table = weak.lock()) table->Remove(id);
  });
  std::lock_guard lock(table_->mu);
  if (auto it = table_->held.find(id); it != table_->held.end()) it->second.lease.swap(lease);
}

std::optional<HeldValues::Held> HeldValues::Table::Remove(Id id) {
  std::lock_guard lock(mu);
  auto it = held.find(id);
  if (it == held.end()) return std::nullopt;
  Held removed = std::move(it->second);
  held.erase(it);
  return removed;
}

std::optional<HeldValues::Value> HeldValues::Take(int64_t step_id, int64_t request_id) {
  std::optional<Held> taken = table_->Remove({step_id, request_id});
  if (!taken.has_value()) return std::nullopt;
  return std::move(taken->value);
}

void HeldValues::DropStep(int64_t step_id) {
  std::vector<Held> dropped;
  std::lock_guard lock(table_->mu);
  for (auto it = table_->held.begin(); it != table_->held.end();) {
    if (it->first.first != step_id) {
      ++it;
      continue;
    }
    dropped.push_back(std::move(it->second));
    table_->held.erase(it++);
  }
}

void HeldValues::Clear() {
  absl::flat_hash_map<Id, Held> dropped;
  std::lock_guard lock(table_->mu);
  dropped.swap(table_->held);
}

size_t HeldValues::size() const {
  std::lock_guard lock(table_->mu);
  return table_->held.size();
}

}  // namespace rdv::control
