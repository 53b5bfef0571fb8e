// The cases of the Rendezvous conformance suite (rendezvous_conformance.h).
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cancellation.h"
#include "tests/core/rendezvous_conformance.h"
#include "tests/test_util.h"

namespace rdv::conformance {
namespace {

using testing::FloatTensor;
using testing::FloatValues;
using testing::Key;
using testing::kWaitLimit;
using testing::RecvResult;

TEST_P(RendezvousConformanceTest, SendBeforeRecv) {
  ASSERT_TRUE(rendezvous_->Send(Key("a"), {}, FloatTensor({1, 2, 3}), false).ok());
  RecvResult r;
  rendezvous_->RecvAsync(Key("a"), {}, r.Capture());
  ASSERT_TRUE(r.Wait());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(FloatValues(r.value), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(r.is_dead);
  EXPECT_EQ(r.calls, 1);
}

TEST_P(RendezvousConformanceTest, RecvBeforeSend) {
  RecvResult r;
  rendezvous_->RecvAsync(Key("a"), {}, r.Capture());
  EXPECT_FALSE(r.done.HasBeenNotified());
  ASSERT_TRUE(rendezvous_->Send(Key("a"), {}, FloatTensor({4}), false).ok());
  ASSERT_TRUE(r.Wait());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(FloatValues(r.value), (std::vector<float>{4}));
  EXPECT_EQ(r.calls, 1);
}

TEST_P(RendezvousConformanceTest, ManySendsOnOneKeyArriveInOrder) {
  constexpr int kCount = 100;
  for (int i = 0; i < kCount / 2; ++i) {
    ASSERT_TRUE(rendezvous_->Send(Key("fifo"), {}, FloatTensor({float(i)}), false).ok());
  }
  std::vector<RecvResult> results(kCount);
  for (auto& r : results) rendezvous_->RecvAsync(Key("fifo"), {}, r.Capture());
  for (int i = kCount / 2; i < kCount; ++i) {
    ASSERT_TRUE(rendezvous_->Send(Key("fifo"), {}, FloatTensor({float(i)}), false).ok());
  }
  std::vector<float> received;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(results[i].Wait());
    ASSERT_TRUE(results[i].status.ok()) << results[i].status;
    const std::vector<float> value = FloatValues(results[i].value);
    ASSERT_EQ(value.size(), 1u);
    if (GetParam().recvs_of_one_key_in_order) {
      EXPECT_EQ(value[0], float(i));
    }
    received.push_back(value[0]);
  }
  // Whatever the order of the Recvs, each value arrives once.
  std::sort(received.begin(), received.end());
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(received[i], float(i));
}

TEST_P(RendezvousConformanceTest, KeysAreIndependent) {
  RecvResult b;
  rendezvous_->RecvAsync(Key("b"), {}, b.Capture());
  ASSERT_TRUE(rendezvous_->Send(Key("a"), {}, FloatTensor({1}), false).ok());
  EXPECT_FALSE(b.done.HasBeenNotified());
  ASSERT_TRUE(rendezvous_->Send(Key("b"), {}, FloatTensor({2}), false).ok());
  ASSERT_TRUE(b.Wait());
  EXPECT_EQ(FloatValues(b.value), (std::vector<float>{2}));
}

TEST_P(RendezvousConformanceTest, IsDeadPassesThrough) {
  ASSERT_TRUE(rendezvous_->Send(Key("dead"), {}, Tensor(), true).ok());
  Tensor value;
  bool is_dead = false;
  const absl::Status status = rendezvous_->Recv(Key("dead"), {}, &value, &is_dead, kWaitLimit);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(is_dead);
  EXPECT_FALSE(value.IsInitialized());
}

TEST_P(RendezvousConformanceTest, BlockingRecvGetsAValueSentFromAnotherThread) {
  std::thread producer([&] { EXPECT_TRUE(rendezvous_->Send(Key("t"), {}, FloatTensor({9}), false).ok()); });
  Tensor value;
  bool is_dead = true;
  const absl::Status s = rendezvous_->Recv(Key("t"), {}, &value, &is_dead, kWaitLimit);
  producer.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(is_dead);
  EXPECT_EQ(FloatValues(value), (std::vector<float>{9}));
}

TEST_P(RendezvousConformanceTest, AbortWakesEveryWaiterOnceAndFailsLaterCalls) {
  std::vector<RecvResult> waiters(10);
  for (size_t i = 0; i < waiters.size(); ++i) {
    rendezvous_->RecvAsync(Key(absl::StrCat("k", i % 3)), {}, waiters[i].Capture());
  }
  ASSERT_TRUE(rendezvous_->Send(Key("buffered"), {}, FloatTensor({1}), false).ok());
  rendezvous_->StartAbort(absl::AbortedError("step 7 failed"));
  rendezvous_->StartAbort(absl::InternalError("second abort is ignored"));
  for (auto& w : waiters) {
    ASSERT_TRUE(w.Wait());
    EXPECT_EQ(w.calls, 1);
    EXPECT_EQ(w.status.code(), absl::StatusCode::kAborted);
    EXPECT_EQ(w.status.message(), "step 7 failed");
  }
  const absl::Status send = rendezvous_->Send(Key("x"), {}, FloatTensor({1}), false);
  EXPECT_EQ(send.code(), absl::StatusCode::kAborted);
  RecvResult later;
  rendezvous_->RecvAsync(Key("buffered"), {}, later.Capture());
  ASSERT_TRUE(later.done.HasBeenNotified()) << "a Recv after abort fails at once";
  EXPECT_EQ(later.status.code(), absl::StatusCode::kAborted);
  Tensor value;
  bool is_dead;
  EXPECT_EQ(rendezvous_->Recv(Key("y"), {}, &value, &is_dead, kWaitLimit).code(),
            absl::StatusCode::kAborted);
}

TEST_P(RendezvousConformanceTest, CancelRemovesOnlyItsWaiter) {
  CancellationManager cancel_first;
  RecvResult first, second;
  RendezvousArgs args;
  args.cancellation_manager = &cancel_first;
  rendezvous_->RecvAsync(Key("c"), args, first.Capture());
  rendezvous_->RecvAsync(Key("c"), {}, second.Capture());
  cancel_first.StartCancel();
  ASSERT_TRUE(first.Wait());
  EXPECT_EQ(first.status.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(second.done.HasBeenNotified());
  ASSERT_TRUE(rendezvous_->Send(Key("c"), {}, FloatTensor({5}), false).ok());
  if (GetParam().cancelled_recv_may_take_a_value &&
      !second.done.WaitForNotificationWithTimeout(absl::Seconds(2))) {
    // The value went to the cancelled Recv's call after all; the next one
    // must reach the waiter that is left.
    ASSERT_TRUE(rendezvous_->Send(Key("c"), {}, FloatTensor({6}), false).ok());
  }
  ASSERT_TRUE(second.Wait());
  ASSERT_TRUE(second.status.ok()) << second.status;
  const std::vector<float> got = FloatValues(second.value);
  if (GetParam().cancelled_recv_may_take_a_value) {
    EXPECT_TRUE(got == std::vector<float>{5} || got == std::vector<float>{6});
  } else {
    EXPECT_EQ(got, (std::vector<float>{5}));
  }
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(second.calls, 1);
}

TEST_P(RendezvousConformanceTest, RecvWithCancelledManagerFailsAtOnce) {
  CancellationManager cancel;
  cancel.StartCancel();
  RendezvousArgs args;
  args.cancellation_manager = &cancel;
  RecvResult r;
  rendezvous_->RecvAsync(Key("c"), args, r.Capture());
  ASSERT_TRUE(r.done.HasBeenNotified());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
  Tensor value;
  bool is_dead;
  EXPECT_EQ(rendezvous_->Recv(Key("c"), args, &value, &is_dead, kWaitLimit).code(),
            absl::StatusCode::kCancelled);
}

TEST_P(RendezvousConformanceTest, RecvTimeoutLeavesNothingBehind) {
  {
    Tensor value;
    bool is_dead = false;
    const absl::Status s =
        rendezvous_->Recv(Key("late"), {}, &value, &is_dead, absl::Milliseconds(20));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(s.message().find(";late;"), absl::string_view::npos) << s;
  }
  // The timed-out Recv's stack frame is gone; a late Send must not touch it
  // (ASan would see it) and must stay buffered for the next Recv.
  ASSERT_TRUE(rendezvous_->Send(Key("late"), {}, FloatTensor({3}), false).ok());
  Tensor value;
  bool is_dead = false;
  const absl::Status late = rendezvous_->Recv(Key("late"), {}, &value, &is_dead, kWaitLimit);
  ASSERT_TRUE(late.ok()) << late;
  EXPECT_EQ(FloatValues(value), (std::vector<float>{3}));
}

TEST_P(RendezvousConformanceTest, CallerCancellationOfBlockingRecv) {
  CancellationManager cancel;
  RendezvousArgs args;
  args.cancellation_manager = &cancel;
  absl::Status status;
  std::thread receiver([&] {
    Tensor value;
    bool is_dead;
    status = rendezvous_->Recv(Key("blocked"), args, &value, &is_dead, kWaitLimit);
  });
  // Cancel only once the Recv is queued, so the test covers a waiting Recv.
  const absl::Time deadline = absl::Now() + kWaitLimit;
  auto waiters = [&] { return GetParam().waiters(*rendezvous_); };
  while (waiters() == 0 && absl::Now() < deadline) std::this_thread::yield();
  ASSERT_EQ(waiters(), 1u);
  cancel.StartCancel();
  receiver.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(waiters(), 0u);
}

TEST_P(RendezvousConformanceTest, AbortWithOkStatusStillAborts) {
  rendezvous_->StartAbort(absl::OkStatus());
  EXPECT_EQ(rendezvous_->Send(Key("x"), {}, FloatTensor({1}), false).code(),
            absl::StatusCode::kAborted);
}

TEST_P(RendezvousConformanceTest, DestroyingFailsWaiters) {
  RecvResult r;
  rendezvous_->RecvAsync(Key("orphan"), {}, r.Capture());
  rendezvous_.reset();
  ASSERT_TRUE(r.Wait());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace rdv::conformance
