#include "core/cancellation.h"

#include <atomic>
#include <thread>

#include "core/notification.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv {
namespace {

TEST(CancellationManagerTest, RunsEachCallbackOnce) {
  CancellationManager cm;
  int runs = 0;
  ASSERT_TRUE(cm.RegisterCallback(cm.NewToken(), [&] { ++runs; }));
  ASSERT_TRUE(cm.RegisterCallback(cm.NewToken(), [&] { ++runs; }));
  cm.StartCancel();
  cm.StartCancel();
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(cm.IsCancelled());
}

TEST(CancellationManagerTest, DeregisteredCallbackNeverRuns) {
  CancellationManager cm;
  bool ran = false;
  const auto token = cm.NewToken();
  ASSERT_TRUE(cm.RegisterCallback(token, [&] { ran = true; }));
  EXPECT_TRUE(cm.DeregisterCallback(token));
  cm.StartCancel();
  EXPECT_FALSE(ran);
}

TEST(CancellationManagerTest, RegisterAfterCancelFails) {
  CancellationManager cm;
  cm.StartCancel();
  EXPECT_FALSE(cm.RegisterCallback(cm.NewToken(), [] {}));
}

TEST(CancellationManagerTest, DeregisterDuringCancelWaitsForTheCallback) {
  CancellationManager cm;
  Notification entered, release;
  std::atomic<bool> finished{false};
  const auto token = cm.NewToken();
  ASSERT_TRUE(cm.RegisterCallback(token, [&] {
    entered.Notify();
    ASSERT_TRUE(release.WaitForNotificationWithTimeout(testing::kWaitLimit));
    finished = true;
  }));
  std::thread canceller([&] { cm.StartCancel(); });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(testing::kWaitLimit));
  std::thread releaser([&] { release.Notify(); });
  EXPECT_FALSE(cm.DeregisterCallback(token));
  EXPECT_TRUE(finished) << "Deregister returned while the callback still ran";
  canceller.join();
  releaser.join();
}

TEST(CancellationManagerTest, DeregisterFromInsideACallbackDoesNotDeadlock) {
  CancellationManager cm;
  const auto other = cm.NewToken();
  ASSERT_TRUE(cm.RegisterCallback(other, [] {}));
  bool deregistered = true;
  ASSERT_TRUE(cm.RegisterCallback(cm.NewToken(), [&] { deregistered = cm.DeregisterCallback(other); }));
  cm.StartCancel();
  EXPECT_FALSE(deregistered);
}

}  // namespace
}  // namespace rdv
