// PeerWatch against real gRPC servers on loopback: a worker it reached and
// then lost is told UNAVAILABLE within the peer timeout; an address that
// never answered is unreachable, not lost, for a watch that has not heard
// from it; every wait is bounded.
#include "control/peer_watch.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "control/security.h"
#include "control/worker_cache.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "core/logging.h"
#include "core/notification.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

constexpr absl::Duration kPeerTimeout = absl::Seconds(1);

struct Told {
  Notification done;
  absl::Status status;
  PeerWatch::Lost Capture() {
    return [this](const absl::Status& told) {
      status = told;
      done.Notify();
    };
  }
};

std::unique_ptr<PeerWatch> WatchOf(const std::string& address) {
  ControlOptions options;
  options.peer_timeout = kPeerTimeout;
  return std::make_unique<PeerWatch>(
      CreateMemberChannel(address, SecurityOptions{}, PeerChannelArguments(options)),
      "/job:worker/replica:0/task:1", address, kPeerTimeout);
}

std::string NobodyListens() {
  absl::StatusOr<int> port = FreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status();
  return absl::StrCat("127.0.0.1:", port.value_or(1));
}

TEST(PeerWatchTest, AWorkerReachedThenStoppedIsLostWithinThePeerTimeout) {
  WorkerServerOptions options;
  options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1");
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  Told told;  // outlives the watch, whose thread may tell it
  std::unique_ptr<PeerWatch> watch = WatchOf((*server)->address());
  watch->WatchOnceAnswered(told.Capture());
  ASSERT_TRUE(rdv::testing::PollUntil([&] { return watch->WatchingReached(); }));
  (*server)->Shutdown();
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(told.done.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit));
  EXPECT_TRUE(absl::IsUnavailable(told.status)) << told.status;
  EXPECT_LT(absl::Now() - stopped, kPeerTimeout + absl::Seconds(2));
}

// A loss that ends only transfers no Recv here waits for (read ahead, or
// held for a consumer; a peer's clean exit may end those) is logged at
// info; one that ends a transfer a Recv waits for, as a warning. Both are
// told.
TEST(PeerWatchTest, ALossIsAWarningOnlyWhereARecvWaited) {
  const LogLevel level = CurrentLogLevel();
  SetLogLevel(LogLevel::kInfo);
  for (const bool awaited : {false, true}) {
    WorkerServerOptions options;
    options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1");
    absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    Told ahead;
    Told waited;
    std::unique_ptr<PeerWatch> watch = WatchOf((*server)->address());
    watch->Watch(ahead.Capture(), PeerWatch::Stake::kUnawaited);
    if (awaited) watch->Watch(waited.Capture());
    ::testing::internal::CaptureStderr();
    (*server)->Shutdown();
    const bool told = ahead.done.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit) &&
                      (!awaited || waited.done.WaitForNotificationWithTimeout(
                                       rdv::testing::kWaitLimit));
    const std::string logged = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(told) << "awaited " << awaited;
    EXPECT_TRUE(absl::IsUnavailable(ahead.status)) << ahead.status;
    EXPECT_EQ(absl::StrContains(logged, "rdv warning"), awaited) << logged;
    EXPECT_EQ(absl::StrContains(logged, "no Recv here waited"), !awaited) << logged;
  }
  SetLogLevel(level);
}

TEST(PeerWatchTest, AnAddressThatNeverAnsweredIsNotLostToAWatchThatHeardNothing) {
  Told told;
  std::unique_ptr<PeerWatch> watch = WatchOf(NobodyListens());
  const uint64_t id = watch->WatchOnceAnswered(told.Capture());
  // Several probes fail meanwhile; only the deadline ends the watch.
  watch->SetDeadline(id, absl::Now() + 3 * kPeerTimeout);
  ASSERT_TRUE(told.done.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit));
  EXPECT_TRUE(absl::IsDeadlineExceeded(told.status)) << told.status;
  EXPECT_FALSE(watch->WatchingReached());
}

TEST(PeerWatchTest, AWatchThatHeardFromTheWorkerCountsItsSilenceAsLoss) {
  Told told;
  std::unique_ptr<PeerWatch> watch = WatchOf(NobodyListens());
  watch->Watch(told.Capture());
  ASSERT_TRUE(told.done.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit));
  EXPECT_TRUE(absl::IsUnavailable(told.status)) << told.status;
}

TEST(PeerWatchTest, UnwatchedBeforeTheLossIsNeverTold) {
  Told told;
  Told other;
  std::unique_ptr<PeerWatch> watch = WatchOf(NobodyListens());
  const uint64_t id = watch->WatchOnceAnswered(told.Capture());
  watch->Unwatch(id);
  watch->Watch(other.Capture());
  ASSERT_TRUE(other.done.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit));
  EXPECT_FALSE(told.done.HasBeenNotified());
}

// The owner of a watch may go with the last transfer it told: the callback
// destroys the watch on the watch's own thread.
TEST(PeerWatchTest, ALostCallbackMayDestroyTheWatch) {
  Notification destroyed;
  std::unique_ptr<PeerWatch> watch = WatchOf(NobodyListens());
  PeerWatch* const raw = watch.get();
  raw->Watch([owned = std::shared_ptr<PeerWatch>(std::move(watch)),
              &destroyed](const absl::Status&) mutable {
    owned.reset();
    destroyed.Notify();
  });
  ASSERT_TRUE(destroyed.WaitForNotificationWithTimeout(rdv::testing::kWaitLimit));
}

}  // namespace
}  // namespace rdv::control
