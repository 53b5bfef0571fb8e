#include "control/held_transfers.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv::control {

uint64_t HeldTransfers::Hold(int64_t step_id, Tensor tensor,
                             std::shared_ptr<const void> keepalive,
                             const ConsumerWatcher& consumer) {
  uint64_t id = 0;
  {
    std::lock_guard lock(random_mu_);
    while (id == 0) id = absl::Uniform<uint64_t>(random_);
  }
  held_.Insert(id, Held{step_id, std::move(tensor), std::move(keepalive)}, consumer);
  return id;
}

absl::Status HeldTransfers::Release(const ReleasedTransfer& transfer) {
  const bool released = held_
                            .Take(transfer.transfer_id(),
                                  [&transfer](const Held& held) {
                                    return held.step_id == transfer.step_id() &&
                                           held.tensor.TotalBytes() == transfer.length();
                                  })
                            .has_value();
  if (released) return absl::OkStatus();
  {
    // An ack that crossed the step's cleanup: the buffer is already free.
    std::lock_guard lock(cleaned_mu_);
    if (cleaned_steps_.contains(transfer.step_id())) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ReleaseTransfers: this worker holds no ", transfer.cuda_ipc() ? "CUDA IPC " : "",
      "transfer ", transfer.transfer_id(), " of step ", transfer.step_id(), " with length ",
      transfer.length(), " (released already, or its consumer was lost)"));
}

void HeldTransfers::DropStep(int64_t step_id) {
  held_.DropIf([step_id](uint64_t, const Held& held) { return held.step_id == step_id; });
  std::lock_guard lock(cleaned_mu_);
  if (cleaned_steps_.size() >= kCleanedStepsKept) cleaned_steps_.clear();
  cleaned_steps_.insert(step_id);
}

}  // namespace rdv::control
