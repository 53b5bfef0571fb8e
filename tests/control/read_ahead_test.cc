// Read-ahead's bookkeeping (control/read_ahead.h) on its own: how many
// values a key's Recvs ask for ahead, and when, and how a slot hands its
// value to the Recv that claims it.
#include "control/read_ahead.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace rdv::control {
namespace {

using Slots = std::vector<std::shared_ptr<ReadAhead::Slot>>;

// Takes a slot of `key` and returns how many calls the Recv starts.
size_t Started(ReadAhead& read_ahead, size_t depth) {
  Slots started;
  read_ahead.Take("key", depth, &started);
  return started.size();
}

TEST(ReadAheadTest, AKeysFirstRecvReadsNothingAheadAndDepthZeroNever) {
  ReadAhead read_ahead;
  Slots started;
  EXPECT_EQ(read_ahead.Take("key", ReadAhead::kMaxValues, &started), nullptr);
  EXPECT_TRUE(started.empty());
  EXPECT_EQ(read_ahead.Take("other", 0, &started), nullptr);
  EXPECT_EQ(read_ahead.Take("other", 0, &started), nullptr);
  EXPECT_TRUE(started.empty());
}

TEST(ReadAheadTest, AShallowKeyIsToppedUpAtEveryRecv) {
  ReadAhead read_ahead;
  constexpr size_t kDepth = ReadAhead::kBatchFromDepth - 1;
  EXPECT_EQ(Started(read_ahead, kDepth), 0u);
  EXPECT_EQ(Started(read_ahead, kDepth), kDepth + 1);  // its own and depth ahead
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Started(read_ahead, kDepth), 1u) << i;
}

// A deep key asks for half its depth at once, once half is taken: its
// top-ups' requests travel in one message (FastPath::StartAll).
TEST(ReadAheadTest, ADeepKeyIsToppedUpByHalfItsDepthAtATime) {
  ReadAhead read_ahead;
  constexpr size_t kDepth = ReadAhead::kMaxValues;
  EXPECT_EQ(Started(read_ahead, kDepth), 0u);
  EXPECT_EQ(Started(read_ahead, kDepth), kDepth + 1);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kDepth / 2; ++i) EXPECT_EQ(Started(read_ahead, kDepth), 0u) << i;
    EXPECT_EQ(Started(read_ahead, kDepth), kDepth / 2 + 1) << round;
  }
}

TEST(ReadAheadTest, SlotsHandOutValuesInTheOrderTheyWereAskedFor) {
  ReadAhead read_ahead;
  Slots started;
  read_ahead.Take("key", 2, &started);
  std::shared_ptr<ReadAhead::Slot> first = read_ahead.Take("key", 2, &started);
  ASSERT_EQ(started.size(), 3u);
  EXPECT_EQ(first, started[0]);
  started[1]->Deliver(absl::OkStatus(), Tensor(), /*is_dead=*/true);
  std::shared_ptr<ReadAhead::Slot> second = read_ahead.Take("key", 2, &started);
  EXPECT_EQ(second, started[1]);
  bool dead = false;
  second->Claim([&](absl::Status status, Tensor, bool is_dead) {
    EXPECT_TRUE(status.ok());
    dead = is_dead;
  });
  EXPECT_TRUE(dead) << "a slot delivered before its claim runs the claim at once";
  bool finished = false;
  first->Claim([&](absl::Status status, Tensor, bool) {
    EXPECT_TRUE(absl::IsCancelled(status));
    finished = true;
  });
  EXPECT_FALSE(finished);
  first->Deliver(absl::CancelledError("ended"), Tensor(), false);
  EXPECT_TRUE(finished) << "a claim before the value runs when it is delivered";
}

TEST(ReadAheadTest, AWithdrawnClaimPutsItsSlotFirstInLine) {
  ReadAhead read_ahead;
  Slots started;
  read_ahead.Take("key", 2, &started);
  std::shared_ptr<ReadAhead::Slot> first = read_ahead.Take("key", 2, &started);
  bool ran = false;
  first->Claim([&](absl::Status, Tensor, bool) { ran = true; });
  ReadAhead::Finish withdrawn;
  ASSERT_TRUE(read_ahead.Withdraw("key", first, &withdrawn));
  EXPECT_FALSE(ran);
  EXPECT_EQ(read_ahead.Take("key", 2, &started), first);
}

// A key the fast path forgot still hands out what it read ahead, oldest
// first, and asks for nothing more.
TEST(ReadAheadTest, AForgottenKeysSlotsAreTakenInOrderAndNoneAdded) {
  ReadAhead read_ahead;
  Slots started;
  EXPECT_FALSE(read_ahead.HasLeft("key"));
  EXPECT_EQ(read_ahead.TakeLeft("key"), nullptr);
  read_ahead.Take("key", 2, &started);
  read_ahead.Take("key", 2, &started);
  ASSERT_EQ(started.size(), 3u);
  for (size_t i = 1; i < started.size(); ++i) {
    EXPECT_TRUE(read_ahead.HasLeft("key")) << i;
    EXPECT_EQ(read_ahead.TakeLeft("key"), started[i]) << i;
  }
  EXPECT_FALSE(read_ahead.HasLeft("key"));
  EXPECT_EQ(read_ahead.TakeLeft("key"), nullptr);
  EXPECT_EQ(started.size(), 3u);
}

}  // namespace
}  // namespace rdv::control
