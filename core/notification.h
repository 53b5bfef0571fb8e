// A one-shot event, like absl::Notification, on std::mutex and
// std::condition_variable. rdv uses the standard primitives for all its
// locking: Debian's Abseil is built with absl::Mutex deadlock detection on
// (a global lock on every acquisition) and without ThreadSanitizer
// annotations, so TSan cannot see its synchronization.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace rdv {

class Notification {
 public:
  // At most once.
  void Notify() {
    std::lock_guard lock(mu_);
    notified_ = true;
    cv_.notify_all();
  }

  bool HasBeenNotified() const {
    std::lock_guard lock(mu_);
    return notified_;
  }

  void WaitForNotification() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return notified_; });
  }

  // False when `timeout` passed first. An infinite timeout waits forever.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool notified_ = false;
};

}  // namespace rdv
