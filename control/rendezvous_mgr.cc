#include "control/rendezvous_mgr.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace rdv::control {

RendezvousMgr::~RendezvousMgr() { CleanupAll(); }

std::shared_ptr<Rendezvous> RendezvousMgr::Find(int64_t step_id) {
  std::lock_guard lock(mu_);
  auto& slot = steps_[step_id];
  if (slot == nullptr) slot = factory_(step_id);
  return slot;
}

std::shared_ptr<Rendezvous> RendezvousMgr::FindExisting(int64_t step_id) const {
  std::lock_guard lock(mu_);
  auto it = steps_.find(step_id);
  return it == steps_.end() ? nullptr : it->second;
}

void RendezvousMgr::Cleanup(int64_t step_id) {
  std::shared_ptr<Rendezvous> rendezvous;
  {
    std::lock_guard lock(mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end()) return;
    rendezvous = std::move(it->second);
    steps_.erase(it);
  }
  // Outside the lock: the abort runs the waiters' callbacks.
  rendezvous->StartAbort(absl::AbortedError(absl::StrCat("Cleanup ", step_id)));
}

void RendezvousMgr::CleanupAll() {
  absl::flat_hash_map<int64_t, std::shared_ptr<Rendezvous>> steps;
  {
    std::lock_guard lock(mu_);
    steps.swap(steps_);
  }
  for (auto& [step_id, rendezvous] : steps) {
    rendezvous->StartAbort(absl::AbortedError(absl::StrCat("Cleanup ", step_id)));
  }
}

size_t RendezvousMgr::NumSteps() const {
  std::lock_guard lock(mu_);
  return steps_.size();
}

}  // namespace rdv::control
