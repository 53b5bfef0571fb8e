// Concurrency tests; CI runs them under ThreadSanitizer.
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/notification.h"
#include "core/intra_process_rendezvous.h"
#include "core/local_rendezvous.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv {
namespace {

using testing::FloatTensor;
using testing::Key;
using testing::kWaitLimit;

constexpr int kThreads = 8;
constexpr int kKeysPerThread = 10000;

// Eight producers and eight consumers over 10 000 keys each; half the
// consumers arrive before their producer. Every value arrives exactly once,
// intact.
TEST(RendezvousStressTest, EightThreadsTenThousandKeys) {
  IntraProcessRendezvous rendezvous;
  std::vector<ParsedKey> keys;
  keys.reserve(kThreads * kKeysPerThread);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeysPerThread; ++i) keys.push_back(Key(absl::StrCat("s", t, "_", i)));
  }
  std::atomic<int> outstanding{kThreads * kKeysPerThread};
  Notification all_received;
  std::atomic<int> wrong{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const ParsedKey& key = keys[t * kKeysPerThread + i];
        const float expected = float(t * kKeysPerThread + i);
        rendezvous.RecvAsync(key, {},
                             [&, expected](const absl::Status& s, const RendezvousArgs&,
                                           const RendezvousArgs&, const Tensor& v, bool) {
                               if (!s.ok()) {
                                 ++failed;
                               } else if (v.flat<float>()[0] != expected) {
                                 ++wrong;
                               }
                               if (--outstanding == 0) all_received.Notify();
                             });
      }
    });
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const float value = float(t * kKeysPerThread + i);
        if (!rendezvous.Send(keys[t * kKeysPerThread + i], {}, FloatTensor({value}), false).ok()) {
          ++failed;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(all_received.WaitForNotificationWithTimeout(kWaitLimit));
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const auto pending = rendezvous.CountPending();
  EXPECT_EQ(pending.values, 0u);
  EXPECT_EQ(pending.waiters, 0u);
}

// Abort races with senders and receivers: every Recv completes exactly
// once, either with its value or with the abort status.
TEST(RendezvousStressTest, AbortRacingWithTraffic) {
  LocalRendezvous rendezvous;
  constexpr int kPerThread = 2000;
  std::atomic<int> completions{0};
  std::atomic<int> bad_status{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        rendezvous.RecvAsync(Key(absl::StrCat("a", t, "_", i)), {},
                             [&](const absl::Status& s, const RendezvousArgs&,
                                 const RendezvousArgs&, const Tensor&, bool) {
                               if (!s.ok() && s.code() != absl::StatusCode::kAborted) ++bad_status;
                               ++completions;
                             });
      }
    });
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        (void)rendezvous.Send(Key(absl::StrCat("a", t, "_", i)), {}, FloatTensor({1}), false);
      }
    });
  }
  threads.emplace_back([&] { rendezvous.StartAbort(absl::AbortedError("racing abort")); });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(completions.load(), 4 * kPerThread);
  EXPECT_EQ(bad_status.load(), 0);
  const auto pending = rendezvous.CountPending();
  EXPECT_EQ(pending.values + pending.waiters, 0u) << "abort left items behind";
}

// Cancellation races with the matching Send: the Recv completes once, with
// the value or CANCELLED, and a value it did not take stays buffered.
TEST(RendezvousStressTest, CancelRacingWithSend) {
  LocalRendezvous rendezvous;
  constexpr int kRounds = 2000;
  for (int i = 0; i < kRounds; ++i) {
    const ParsedKey key = Key(absl::StrCat("c", i));
    CancellationManager cancel;
    RendezvousArgs args;
    args.cancellation_manager = &cancel;
    testing::RecvResult result;
    rendezvous.RecvAsync(key, args, result.Capture());
    std::thread sender([&] { ASSERT_TRUE(rendezvous.Send(key, {}, FloatTensor({1}), false).ok()); });
    cancel.StartCancel();
    sender.join();
    ASSERT_TRUE(result.Wait());
    ASSERT_EQ(result.calls, 1);
    const auto pending = rendezvous.CountPending();
    if (result.status.ok()) {
      EXPECT_EQ(pending.values, 0u);
    } else {
      ASSERT_EQ(result.status.code(), absl::StatusCode::kCancelled);
      EXPECT_EQ(pending.values, 1u);
      Tensor value;
      bool dead;
      ASSERT_TRUE(rendezvous.Recv(key, {}, &value, &dead, kWaitLimit).ok());
    }
  }
}

// Blocking Recvs that time out while Sends race them: no value is lost.
TEST(RendezvousStressTest, TimeoutRacingWithSend) {
  LocalRendezvous rendezvous;
  constexpr int kRounds = 300;
  for (int i = 0; i < kRounds; ++i) {
    const ParsedKey key = Key(absl::StrCat("t", i));
    std::thread sender([&] { ASSERT_TRUE(rendezvous.Send(key, {}, FloatTensor({2}), false).ok()); });
    Tensor value;
    bool dead;
    const absl::Status s = rendezvous.Recv(key, {}, &value, &dead, absl::Microseconds(50));
    sender.join();
    if (!s.ok()) {
      ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
      ASSERT_TRUE(rendezvous.Recv(key, {}, &value, &dead, kWaitLimit).ok());
    }
    EXPECT_EQ(value.flat<float>()[0], 2.0f);
  }
  EXPECT_EQ(rendezvous.CountPending().values, 0u);
}

}  // namespace
}  // namespace rdv
