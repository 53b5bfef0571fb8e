#include "core/notification.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

// A yield longer than this means another thread held the waiter's CPU for
// most of a time slice. One alone proves little (the hypervisor ran another
// guest, or a progress thread's 64 MiB copy ran to its end); several within
// a window mean a thread on that CPU that does not yield (a user's busy
// compute thread), so each wait's first yield would cost a slice.
constexpr absl::Duration kSlowYield = absl::Milliseconds(1);
constexpr absl::Duration kSlowYieldWindow = absl::Seconds(1);
// rdv-bench's default sizes saw at most 5 in one second, in its 64 MiB row.
constexpr int kSlowYieldsToPause = 8;
// Then waits sleep at once for this long, and look again after it: that
// thread may have stopped. Finding it again costs 8 slices per pause.
constexpr absl::Duration kSpinPause = absl::Seconds(1);

// CLOCK_MONOTONIC, ns. Races between waiters only shift a count by one.
std::atomic<int64_t> slow_yield_window_start_ns{0};
std::atomic<int> slow_yields_in_window{0};
std::atomic<int64_t> spin_paused_until_ns{0};
std::atomic<bool> spin_pause_logged{false};

void PauseSpin(absl::Duration now, absl::Duration spin) {
  spin_paused_until_ns.store(absl::ToInt64Nanoseconds(now + kSpinPause),
                             std::memory_order_relaxed);
  if (!spin_pause_logged.exchange(true, std::memory_order_relaxed)) {
    RDV_LOG(Info) << kSlowYieldsToPause << " yields of a waiter took over "
                  << absl::FormatDuration(kSlowYield) << " within "
                  << absl::FormatDuration(kSlowYieldWindow)
                  << ": a thread on its CPU does not yield; waits in this process sleep at once"
                  << " for " << absl::FormatDuration(kSpinPause) << " instead of looking for "
                  << absl::ToInt64Microseconds(spin) << " us (RDV_WAIT_SPIN_US) first; later"
                  << " pauses are not logged";
  }
}

void CountSlowYield(absl::Duration now, absl::Duration spin) {
  const int64_t now_ns = absl::ToInt64Nanoseconds(now);
  int64_t window_start = slow_yield_window_start_ns.load(std::memory_order_relaxed);
  if (now_ns - window_start > absl::ToInt64Nanoseconds(kSlowYieldWindow) &&
      slow_yield_window_start_ns.compare_exchange_strong(window_start, now_ns,
                                                         std::memory_order_relaxed)) {
    slow_yields_in_window.store(0, std::memory_order_relaxed);
  }
  if (slow_yields_in_window.fetch_add(1, std::memory_order_relaxed) + 1 >= kSlowYieldsToPause) {
    slow_yields_in_window.store(0, std::memory_order_relaxed);
    PauseSpin(now, spin);
  }
}

bool SpinPausedAt(absl::Duration now) {
  return absl::ToInt64Nanoseconds(now) < spin_paused_until_ns.load(std::memory_order_relaxed);
}

}  // namespace

absl::Duration Notification::Spin() {
  static const absl::Duration spin = [] {
    constexpr int64_t kDefaultSpinUs = 50;
    int64_t spin_us = kDefaultSpinUs;
    if (absl::Status read = env::ReadInt("RDV_WAIT_SPIN_US", 0, 10000, &spin_us); !read.ok()) {
      RDV_LOG(Warning) << read.message() << "; using " << kDefaultSpinUs;
    }
    return absl::Microseconds(spin_us);
  }();
  return spin;
}

void Notification::Notify() {
  if (state_.exchange(kNotified, std::memory_order_acq_rel) == kWaitedFor) {
    FutexWakeAll(state_);
  }
}

bool Notification::SpinUntil(const struct timespec* deadline) const {
  const absl::Duration spin = Spin();
  if (spin <= absl::ZeroDuration()) return HasBeenNotified();
  const absl::Duration start = MonotonicNow();
  if (SpinPausedAt(start)) return HasBeenNotified();
  absl::Duration give_up = start + spin;
  if (deadline != nullptr) give_up = std::min(give_up, absl::DurationFromTimespec(*deadline));
  // One clock read per yield: the end of one yield is the start of the next.
  absl::Duration before = start;
  while (!HasBeenNotified()) {
    if (before >= give_up) return false;
    sched_yield();
    const absl::Duration after = MonotonicNow();
    if (after - before > kSlowYield) {
      CountSlowYield(after, spin);
      return HasBeenNotified();
    }
    before = after;
  }
  return true;
}

bool Notification::SpinPaused() { return SpinPausedAt(MonotonicNow()); }

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
