#include "control/held_transfers.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rdv::control {

// Entries are destroyed after the table's lock is released: a lease's
// destruction may join a watch's thread, whose callbacks take that lock.
HeldTransfers::HeldTransfers() : table_(std::make_shared<Table>()) {}

uint64_t HeldTransfers::Hold(int64_t step_id, Tensor tensor,
                             std::shared_ptr<const void> keepalive,
                             const ConsumerWatcher& consumer) {
  uint64_t id = 0;
  {
    std::lock_guard lock(table_->mu);
    id = table_->next_transfer_id++;
    table_->held.emplace(id, Held{step_id, std::move(tensor), std::move(keepalive), nullptr});
  }
  ConsumerLease lease = consumer.Lease([weak = std::weak_ptr<Table>(table_), id]() {
    if (std::shared_ptr<Table> table = weak.lock()) table->Drop(id);
  });
  std::lock_guard lock(table_->mu);
  // Already released (or its consumer already lost): `lease` goes with
  // this scope, after the lock.
  if (auto it = table_->held.find(id); it != table_->held.end()) it->second.lease.swap(lease);
  return id;
}

void HeldTransfers::Table::Drop(uint64_t id) {
  std::unique_lock lock(mu);
  auto it = held.find(id);
  if (it == held.end()) return;
  Held dropped = std::move(it->second);
  held.erase(it);
  lock.unlock();
}

absl::Status HeldTransfers::Release(const ReleasedTransfer& transfer) {
  std::unique_lock lock(table_->mu);
  auto it = table_->held.find(transfer.transfer_id());
  // An ack that crossed the step's cleanup: the buffer is already free.
  if (it == table_->held.end() && table_->cleaned_steps.contains(transfer.step_id())) {
    return absl::OkStatus();
  }
  if (it == table_->held.end() || it->second.step_id != transfer.step_id() ||
      it->second.tensor.TotalBytes() != transfer.length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReleaseTransfers: this worker holds no ", transfer.cuda_ipc() ? "CUDA IPC " : "",
        "transfer ", transfer.transfer_id(), " of step ", transfer.step_id(), " with length ",
        transfer.length(), " (released already, or its consumer was lost)"));
  }
  Held released = std::move(it->second);
  table_->held.erase(it);
  lock.unlock();
  return absl::OkStatus();
}

void HeldTransfers::DropStep(int64_t step_id) {
  std::vector<Held> dropped;
  std::lock_guard lock(table_->mu);
  for (auto it = table_->held.begin(); it != table_->held.end();) {
    if (it->second.step_id != step_id) {
      ++it;
      continue;
    }
    dropped.push_back(std::move(it->second));
    table_->held.erase(it++);
  }
  if (table_->cleaned_steps.size() >= kCleanedStepsKept) table_->cleaned_steps.clear();
  table_->cleaned_steps.insert(step_id);
}

void HeldTransfers::Clear() {
  absl::flat_hash_map<uint64_t, Held> dropped;
  std::lock_guard lock(table_->mu);
  dropped.swap(table_->held);
}

size_t HeldTransfers::size() const {
  std::lock_guard lock(table_->mu);
  return table_->held.size();
}

}  // namespace rdv::control
