#include "core/notification.h"

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
