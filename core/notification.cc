#include "core/notification.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <ctime>

#include "core/environment.h"
#include "core/logging.h"

namespace rdv {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is one 32-bit word");

uint32_t* FutexWord(std::atomic<uint32_t>& state) { return reinterpret_cast<uint32_t*>(&state); }

// FUTEX_WAIT_BITSET takes an absolute deadline on CLOCK_MONOTONIC, so a
// wait woken early goes back to sleep without recomputing what is left.
void FutexWait(std::atomic<uint32_t>& state, uint32_t expected, const struct timespec* deadline) {
  syscall(SYS_futex, FutexWord(state), FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, deadline,
          nullptr, FUTEX_BITSET_MATCH_ANY);
}

void FutexWakeAll(std::atomic<uint32_t>& state) {
  syscall(SYS_futex, FutexWord(state), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, nullptr, nullptr,
          0);
}

absl::Duration MonotonicNow() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return absl::DurationFromTimespec(now);
}

// How long a waiter looks before it sleeps: RDV_WAIT_SPIN_US, read once.
absl::Duration WaitSpin() {
  static const absl::Duration spin = [] {
    // Off unless asked for: a waiter that yields to a progress thread that
    // polls without yielding (RDV_UCX_PROGRESS=poll) on its CPU waits out
    // that thread's time slice (docs/fast_path.md, "The Recv's wait").
    constexpr int64_t kDefaultSpinUs = 0;
    int64_t spin_us = kDefaultSpinUs;
    if (absl::Status read = env::ReadInt("RDV_WAIT_SPIN_US", 0, 10000, &spin_us); !read.ok()) {
      RDV_LOG(Warning) << read.message() << "; using " << kDefaultSpinUs;
    }
    return absl::Microseconds(spin_us);
  }();
  return spin;
}

}  // namespace

void Notification::Notify() {
  if (state_.exchange(kNotified, std::memory_order_acq_rel) == kWaitedFor) {
    FutexWakeAll(state_);
  }
}

bool Notification::SpinUntil(const struct timespec* deadline) const {
  const absl::Duration spin = WaitSpin();
  if (spin <= absl::ZeroDuration()) return HasBeenNotified();
  absl::Duration give_up = MonotonicNow() + spin;
  if (deadline != nullptr) give_up = std::min(give_up, absl::DurationFromTimespec(*deadline));
  while (!HasBeenNotified()) {
    if (MonotonicNow() >= give_up) return false;
    sched_yield();
  }
  return true;
}

bool Notification::WaitUntil(const struct timespec* deadline) const {
  if (SpinUntil(deadline)) return true;
  uint32_t state = state_.load(std::memory_order_acquire);
  while (state != kNotified) {
    if (state == kUnset &&
        !state_.compare_exchange_weak(state, kWaitedFor, std::memory_order_acquire)) {
      continue;
    }
    // Returns at a wake-up, a signal, the deadline, or at once when the
    // word is no longer kWaitedFor (Notify came between the load and here).
    FutexWait(state_, kWaitedFor, deadline);
    state = state_.load(std::memory_order_acquire);
    if (state != kNotified && deadline != nullptr &&
        MonotonicNow() >= absl::DurationFromTimespec(*deadline)) {
      return false;
    }
  }
  return true;
}

void Notification::WaitForNotification() const { WaitUntil(nullptr); }

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  // Longer than this is forever; it also keeps the timespec arithmetic from
  // overflowing.
  constexpr absl::Duration kForever = absl::Hours(24 * 365);
  if (timeout >= kForever) return WaitUntil(nullptr);
  if (HasBeenNotified()) return true;
  const struct timespec deadline =
      absl::ToTimespec(MonotonicNow() + std::max(timeout, absl::ZeroDuration()));
  return WaitUntil(&deadline);
}

}  // namespace rdv
