#include "control/held_transfers.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv::control {

uint64_t HeldTransfers::Hold(int64_t step_id, Tensor tensor,
                             std::shared_ptr<const void> keepalive) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_transfer_id_++;
  held_.emplace(id, Held{step_id, std::move(tensor), std::move(keepalive)});
  return id;
}

absl::Status HeldTransfers::Release(const ReleasedTransfer& transfer) {
  std::lock_guard lock(mu_);
  auto it = held_.find(transfer.transfer_id());
  // An ack that crossed the step's cleanup: the buffer is already free.
  if (it == held_.end() && cleaned_steps_.contains(transfer.step_id())) {
    return absl::OkStatus();
  }
  if (it == held_.end() || it->second.step_id != transfer.step_id() ||
      it->second.tensor.TotalBytes() != transfer.length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReleaseTransfers: this worker holds no ", transfer.cuda_ipc() ? "CUDA IPC " : "",
        "transfer ", transfer.transfer_id(), " of step ", transfer.step_id(), " with length ",
        transfer.length()));
  }
  held_.erase(it);
  return absl::OkStatus();
}

void HeldTransfers::DropStep(int64_t step_id) {
  std::lock_guard lock(mu_);
  absl::erase_if(held_, [step_id](const auto& entry) { return entry.second.step_id == step_id; });
  if (cleaned_steps_.size() >= kCleanedStepsKept) cleaned_steps_.clear();
  cleaned_steps_.insert(step_id);
}

void HeldTransfers::Clear() {
  std::lock_guard lock(mu_);
  held_.clear();
}

}  // namespace rdv::control
