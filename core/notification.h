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
// With RDV_WAIT_SPIN_US set (default 0: off), a waiter first looks at the
// word for up to that many µs, yielding the CPU between looks, and only
// then sleeps on the futex. A Recv's value often comes within that: the
// notifier then makes no system call, and no sleeping thread is woken,
// which costs a system call on each side (docs/fast_path.md, "The Recv's
// wait", for when it pays and when it hurts).
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
