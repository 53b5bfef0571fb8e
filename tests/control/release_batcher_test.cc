// ReleaseBatcher on a real gRPC channel: releases wait for a RecvTensor to
// carry them, and shutting down never waits out the carry window. Label
// unit, not concurrency: Debian's gRPC is not built with TSan, which then
// reports races inside it; ASan runs it.
#include "control/release_batcher.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "core/logging.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

// Nobody listens there: a call the batcher makes fails, and is only logged.
std::shared_ptr<grpc::Channel> ChannelToNowhere() {
  return grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
}

ReleasedTransfer Transfer(uint64_t id) {
  ReleasedTransfer transfer;
  transfer.set_step_id(7);
  transfer.set_transfer_id(id);
  transfer.set_length(id * 10);
  return transfer;
}

TEST(ReleaseBatcherTest, QueuedReleasesRideOnTheNextRequestOnce) {
  ReleaseBatcher batcher(ChannelToNowhere());
  batcher.Release(Transfer(1));
  batcher.Release(Transfer(2));
  RecvTensorRequest carrier;
  batcher.TakeQueued(carrier.mutable_released());
  ASSERT_EQ(carrier.released_size(), 2);
  EXPECT_EQ(carrier.released(0).transfer_id(), 1u);
  EXPECT_EQ(carrier.released(1).length(), 20u);
  RecvTensorRequest next;
  batcher.TakeQueued(next.mutable_released());
  EXPECT_EQ(next.released_size(), 0);
  batcher.Drain(absl::Seconds(5));
}

// The carry window is still open when the batcher goes: its alarm must not
// fire into freed memory (ASan, TSan).
TEST(ReleaseBatcherTest, GoesWithItsCarryWindowOpen) {
  auto batcher = std::make_unique<ReleaseBatcher>(ChannelToNowhere());
  batcher->Release(Transfer(5));
  const absl::Time start = absl::Now();
  batcher.reset();
  EXPECT_LT(absl::Now() - start, kCarryWindow);
}

TEST(ReleaseBatcherTest, DrainDoesNotWaitOutTheCarryWindow) {
  ReleaseBatcher batcher(ChannelToNowhere());
  batcher.Release(Transfer(3));
  const absl::Time start = absl::Now();
  batcher.Drain(absl::Seconds(5));
  EXPECT_LT(absl::Now() - start, kCarryWindow);
  RecvTensorRequest carrier;
  batcher.TakeQueued(carrier.mutable_released());
  EXPECT_EQ(carrier.released_size(), 0);  // dropped: the producer frees them at cleanup
  batcher.Release(Transfer(4));
  batcher.TakeQueued(carrier.mutable_released());
  EXPECT_EQ(carrier.released_size(), 0);
}

// A producer that cannot be reached (gone first, at a clean end too) held
// nothing that outlives it: the failed release is logged at info, not as a
// warning.
TEST(ReleaseBatcherTest, AReleaseToAProducerThatIsGoneIsNoWarning) {
  const LogLevel level = CurrentLogLevel();
  SetLogLevel(LogLevel::kInfo);
  ReleaseBatcher batcher(ChannelToNowhere());
  ::testing::internal::CaptureStderr();
  batcher.Release(Transfer(6));
  const bool sent = rdv::testing::PollUntil([&] { return batcher.Idle(); });
  const std::string logged = ::testing::internal::GetCapturedStderr();
  SetLogLevel(level);
  ASSERT_TRUE(sent);
  EXPECT_TRUE(absl::StrContains(logged, "found the producer gone")) << logged;
  EXPECT_FALSE(absl::StrContains(logged, "rdv warning")) << logged;
}

}  // namespace
}  // namespace rdv::control
