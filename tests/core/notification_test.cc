#include "core/notification.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rdv {
namespace {

// Far longer than any wait below should take; a hang fails instead.
constexpr absl::Duration kBound = absl::Seconds(60);

TEST(NotificationTest, AWaitAfterNotifyReturnsAtOnce) {
  Notification notification;
  EXPECT_FALSE(notification.HasBeenNotified());
  notification.Notify();
  EXPECT_TRUE(notification.HasBeenNotified());
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::ZeroDuration()));
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::InfiniteDuration()));
  notification.WaitForNotification();
}

TEST(NotificationTest, ATimeoutPassesInFullWithoutANotify) {
  Notification notification;
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(absl::ZeroDuration()));
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(-absl::Seconds(1)));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_FALSE(notification.HasBeenNotified());
}

// A thread that never yields shares the waiter's one CPU, as a user's busy
// compute thread can (rdv's polling progress threads yield when idle): a
// yield to it lasts its time slice, far past the spin, and for a while the
// process's waits sleep at once. Then they look again, as the busy thread
// may have stopped.
TEST(NotificationTest, AWaiterThatYieldedToAThreadThatNeverYieldsPausesLooking) {
  if (Notification::Spin() == absl::ZeroDuration()) {
    GTEST_SKIP() << "RDV_WAIT_SPIN_US=0: no spin";
  }
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    running.store(true);
    const absl::Time end = absl::Now() + kBound;
    while (!stop.load(std::memory_order_relaxed) && absl::Now() < end) {
    }
  });
  while (!running.load()) sched_yield();
  // Each wait yields until the scheduler runs the busy thread in one of
  // its yields; a wait that sleeps lets the busy thread's time grow past
  // the waiter's, so a later yield goes to it.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (!Notification::SpinPaused() && absl::Now() < end) {
    Notification never;
    EXPECT_FALSE(never.WaitForNotificationWithTimeout(absl::Milliseconds(1)));
  }
  stop.store(true);
  busy.join();
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed), 0);
  EXPECT_TRUE(Notification::SpinPaused());
  Notification notified;
  notified.Notify();
  EXPECT_TRUE(notified.WaitForNotificationWithTimeout(absl::ZeroDuration()));
  const absl::Time resume_by = absl::Now() + absl::Seconds(10);
  while (Notification::SpinPaused() && absl::Now() < resume_by) {
    Notification never;
    EXPECT_FALSE(never.WaitForNotificationWithTimeout(absl::Milliseconds(10)));
  }
  EXPECT_FALSE(Notification::SpinPaused());
}

TEST(NotificationTest, EveryWaiterWakesAndSeesWhatCameBeforeTheNotify) {
  Notification notification;
  int payload = 0;
  std::vector<std::thread> waiters;
  std::vector<int> seen(4, -1);
  for (size_t i = 0; i < seen.size(); ++i) {
    waiters.emplace_back([&, i] {
      if (notification.WaitForNotificationWithTimeout(kBound)) seen[i] = payload;
    });
  }
  payload = 42;
  notification.Notify();
  for (std::thread& waiter : waiters) waiter.join();
  for (int value : seen) EXPECT_EQ(value, 42);
}

// The waiter frees the Notification as soon as its wait returns, as a
// blocking Recv frees the one on its stack. Under AddressSanitizer a Notify
// that touched the object after waking would fail here.
TEST(NotificationTest, MayBeFreedAsSoonAsAWaitReturns) {
  for (int round = 0; round < 500; ++round) {
    auto notification = std::make_unique<Notification>();
    Notification* raw = notification.get();
    std::thread notifier([raw] { raw->Notify(); });
    ASSERT_TRUE(notification->WaitForNotificationWithTimeout(kBound)) << "round " << round;
    notification.reset();
    notifier.join();
  }
}

}  // namespace
}  // namespace rdv
