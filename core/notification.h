// A one-shot event, like absl::Notification, on an atomic word and the Linux
// futex. rdv does not use absl::Mutex: Debian's Abseil is built with its
// deadlock detection on (a global lock on every acquisition) and without
// ThreadSanitizer annotations, so TSan cannot see its synchronization.
//
// Why not a mutex and a condition variable: a waiter that is woken while
// the notifier still holds the mutex blocks on it again. Where both threads
// share a CPU (a pinned process: the transport's progress thread completes
// a Recv its caller waits for), that was two more context switches and
// three more futex calls per blocking Recv.
//
// A waiter first looks at the word for up to RDV_WAIT_SPIN_US (default 50
// µs; 0 turns it off), yielding the CPU between looks, and only then sleeps
// on the futex. A Recv's value often comes within that: the notifier then
// makes no system call, and no sleeping thread is woken, which costs a
// system call on each side. When 8 yields within a second took over 1 ms
// each (a thread on the waiter's CPU that never yields, such as a busy
// compute thread, ran out its time slice), the process's waits sleep at
// once for the next second (docs/fast_path.md, "The Recv's wait").
//
// The Notification may be destroyed as soon as a wait on it has returned
// true, even while Notify is still returning: after its store, Notify
// touches only the kernel's futex table, never the object.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace rdv {

class Notification {
 public:
  // At most once. Never blocks.
  void Notify();

  bool HasBeenNotified() const { return state_.load(std::memory_order_acquire) == kNotified; }

  void WaitForNotification() const;

  // False when `timeout` passed first. An infinite timeout waits forever.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const;

  // Whether waits in this process now sleep at once, without looking
  // first, since many yields took longer than a time slice.
  static bool SpinPaused();
  // How long a wait looks before it sleeps: RDV_WAIT_SPIN_US, read once.
  static absl::Duration Spin();

 private:
  enum State : uint32_t { kUnset, kWaitedFor, kNotified };

  // Waits until notified or until `deadline` on CLOCK_MONOTONIC (nullptr:
  // forever). True when notified.
  bool WaitUntil(const struct timespec* deadline) const;
  // Looks at the word, yielding between looks, until notified (true), or
  // the spin time or `deadline` passed (false).
  bool SpinUntil(const struct timespec* deadline) const;

  mutable std::atomic<uint32_t> state_{kUnset};
};

}  // namespace rdv
