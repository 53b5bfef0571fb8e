#include "core/notification.h"

#include <chrono>

namespace rdv {

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  // Longer than this is forever; it also keeps the chrono arithmetic from
  // overflowing.
  constexpr absl::Duration kForever = absl::Hours(24 * 365);
  if (timeout >= kForever) {
    WaitForNotification();
    return true;
  }
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return notified_; });
}

}  // namespace rdv
