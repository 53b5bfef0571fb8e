#include "core/cancellation.h"

#include <utility>

namespace rdv {

bool CancellationManager::RegisterCallback(Token token, Callback callback) {
  std::lock_guard lock(mu_);
  if (cancelling_) return false;
  callbacks_.emplace(token, std::move(callback));
  return true;
}

bool CancellationManager::DeregisterCallback(Token token) {
  std::unique_lock lock(mu_);
  if (!cancelling_) {
    callbacks_.erase(token);
    return true;
  }
  if (cancelling_thread_ != std::this_thread::get_id()) {
    cancelled_cv_.wait(lock, [this] { return cancelled_; });
  }
  return false;
}

void CancellationManager::StartCancel() {
  absl::flat_hash_map<Token, Callback> callbacks;
  {
    std::lock_guard lock(mu_);
    if (cancelling_) return;
    cancelling_ = true;
    cancelling_thread_ = std::this_thread::get_id();
    callbacks.swap(callbacks_);
  }
  for (auto& [token, callback] : callbacks) std::move(callback)();
  std::lock_guard lock(mu_);
  cancelled_ = true;
  cancelled_cv_.notify_all();
}

bool CancellationManager::IsCancelled() const {
  std::lock_guard lock(mu_);
  return cancelling_;
}

}  // namespace rdv
