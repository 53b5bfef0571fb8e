#include "control/read_ahead.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"

namespace rdv::control {
namespace {

constexpr absl::string_view kNotServedUrl = "rdv.control/read_ahead_not_served";

}  // namespace

absl::Status NotServedAhead() {
  absl::Status status = absl::ResourceExhaustedError(
      "the producer had too many requests waiting to serve a read-ahead");
  status.SetPayload(kNotServedUrl, absl::Cord());
  return status;
}

bool IsNotServedAhead(const absl::Status& status) {
  return status.GetPayload(kNotServedUrl).has_value();
}

void ReadAhead::Slot::Deliver(absl::Status status, Tensor value, bool is_dead) {
  Finish finish;
  {
    std::lock_guard lock(mu_);
    delivered_ = true;
    if (finish_ == nullptr) {
      status_ = std::move(status);
      value_ = std::move(value);
      is_dead_ = is_dead;
      return;
    }
    finish = std::move(finish_);
  }
  std::move(finish)(std::move(status), std::move(value), is_dead);
}

void ReadAhead::Slot::Claim(Finish finish) {
  {
    std::lock_guard lock(mu_);
    if (!delivered_) {
      finish_ = std::move(finish);
      return;
    }
  }
  // Delivered: nothing writes the result any more.
  std::move(finish)(std::move(status_), std::move(value_), is_dead_);
}

bool ReadAhead::Slot::Unclaim(Finish* finish) {
  std::lock_guard lock(mu_);
  if (delivered_ || finish_ == nullptr) return false;
  *finish = std::move(finish_);
  finish_ = nullptr;
  return true;
}

size_t ReadAhead::DepthFor(size_t budget_bytes, size_t value_bytes) {
  if (value_bytes == 0) return budget_bytes == 0 ? 0 : kMaxValues;
  return std::min(kMaxValues, budget_bytes / value_bytes);
}

std::shared_ptr<ReadAhead::Slot> ReadAhead::Take(absl::string_view key, size_t depth,
                                                 std::vector<std::shared_ptr<Slot>>* started) {
  std::lock_guard lock(mu_);
  KeyState& state = keys_[key];
  if (++state.recvs < 2 || (depth == 0 && state.slots.empty())) return nullptr;
  // A deep key is topped up once half its values are taken, so that their
  // requests travel together (FastPath::StartAll); a shallow one each time,
  // so that its next value is always on its way. Either way the slot taken
  // below counts.
  const size_t top_up_below = depth >= kBatchFromDepth ? depth / 2 + 1 : depth + 1;
  if (state.slots.size() < top_up_below) {
    while (state.slots.size() < depth + 1) {
      started->push_back(std::make_shared<Slot>());
      state.slots.push_back(started->back());
    }
  }
  return PopOldest(state);
}

std::shared_ptr<ReadAhead::Slot> ReadAhead::TakeLeft(absl::string_view key) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.slots.empty()) return nullptr;
  return PopOldest(it->second);
}

bool ReadAhead::HasLeft(absl::string_view key) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  return it != keys_.end() && !it->second.slots.empty();
}

std::shared_ptr<ReadAhead::Slot> ReadAhead::PopOldest(KeyState& state) {
  std::shared_ptr<Slot> taken = std::move(state.slots.front());
  state.slots.pop_front();
  return taken;
}

bool ReadAhead::Withdraw(absl::string_view key, const std::shared_ptr<Slot>& slot,
                         Finish* finish) {
  std::lock_guard lock(mu_);
  if (!slot->Unclaim(finish)) return false;
  keys_[key].slots.push_front(slot);
  return true;
}

void ReadAhead::Clear() {
  absl::flat_hash_map<std::string, KeyState> cleared;
  {
    std::lock_guard lock(mu_);
    cleared.swap(keys_);
  }
}

}  // namespace rdv::control
