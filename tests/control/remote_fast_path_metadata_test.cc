// The fast path's values whatever their dtype and shape do (change, grow
// past 2 GiB, have more dimensions than a request carries, die), and the
// held requests that bring a value of a changed shape, between this
// process and a producer worker process. Cases of the conformance suite
// (remote_fast_path.h), run for the protocol settings with the fast path
// on.
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/fast_path.h"
#include "control/read_ahead.h"
#include "core/buffer.h"
#include "core/notification.h"
#include "tests/control/remote_fast_path.h"

namespace rdv::control::remote_test {
namespace {

// A value of another shape or dtype than the last comes whole and right,
// with no RecvTensor call: the producer says what it is, and the Recv asks
// for it again, once, with a destination of that shape. So does each
// value asked for ahead with the old shape (read-ahead's depth at most);
// the key's Recvs ask with the new shape after them.
TEST_P(RemoteFastPathTest, FastPathChangedShapeIsAskedForAgain) {
  const ParsedKey key = Key("reshaped");
  const FastPath& fast = *consumer_->fast_path();
  ASSERT_TRUE(Produce(71, {Item(key, DType::kFloat, {16}, 1)}).ok());
  ExpectPattern(71, key, 1, 64);
  const int64_t whole_before = fast.recvs_fetched_by_recv_tensor();
  const int64_t again_before = fast.recvs_asked_again();
  ASSERT_TRUE(Produce(71, {Item(key, DType::kFloat, {4, 100}, 2)}).ok());
  ExpectPattern(71, key, 2, 1600);  // grown: nothing truncated
  ASSERT_TRUE(Produce(71, {Item(key, DType::kInt32, {3}, 3)}).ok());
  ExpectPattern(71, key, 3, 12);  // shrunk and retyped: nothing overrun
  uint32_t seed = 4;
  for (; seed < 4 + ReadAhead::kMaxValues; ++seed) {
    ASSERT_TRUE(Produce(71, {Item(key, DType::kInt32, {3}, seed)}).ok());
    ExpectPattern(71, key, seed, 12);
  }
  const int64_t again_after_changes = fast.recvs_asked_again();
  EXPECT_EQ(fast.recvs_fetched_by_recv_tensor(), whole_before);
  EXPECT_GE(again_after_changes - again_before, 2);
  EXPECT_LE(again_after_changes - again_before, 2 + int64_t{ReadAhead::kMaxValues});
  const int64_t fast_before = fast.recvs_started();
  for (const uint32_t last = seed + 5; seed < last; ++seed) {
    ASSERT_TRUE(Produce(71, {Item(key, DType::kInt32, {3}, seed)}).ok());
    ExpectPattern(71, key, seed, 12);
  }
  EXPECT_GE(fast.recvs_started() - fast_before, 5);
  EXPECT_EQ(fast.recvs_asked_again(), again_after_changes);
  EXPECT_EQ(fast.recvs_fetched_by_recv_tensor(), whole_before);
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << "the changed values were all taken, but " << HeldInAll(Holdings()) << " still held";
  EXPECT_EQ(fast.refused(), 0);
}

// A value of a new size asked for again lands in the Recv's landing buffer
// when that has the new size: the held request's destination is the
// caller's memory, as a first request's is, and nothing copies after. The
// values are larger than what is read ahead for a Recv with a landing
// buffer, so the Recv asks for itself.
TEST_P(RemoteFastPathTest, FastPathValueAskedForAgainLandsInTheCallersBuffer) {
  const ParsedKey key = Key("relanded");
  constexpr int64_t kOldBytes = int64_t{512} << 10;
  constexpr int64_t kNewBytes = int64_t{768} << 10;
  static_assert(kOldBytes > ReadAhead::kMaxLandedValueBytes);
  const FastPath& fast = *consumer_->fast_path();
  ASSERT_TRUE(Produce(83, {Item(key, DType::kUInt8, {kOldBytes}, 1)}).ok());
  ExpectPattern(83, key, 1, static_cast<size_t>(kOldBytes));
  auto landing = Buffer::Allocate(HostAllocator(), static_cast<size_t>(kNewBytes));
  ASSERT_TRUE(landing.ok());
  RendezvousArgs args;
  args.landing = *landing;
  const int64_t again_before = fast.recvs_asked_again();
  const int64_t whole_before = fast.recvs_fetched_by_recv_tensor();
  RecvResult result;
  consumer_->rendezvous_mgr().Find(83)->RecvAsync(key, args, result.Capture());
  ASSERT_TRUE(Produce(83, {Item(key, DType::kUInt8, {kNewBytes}, 2)}).ok());
  ASSERT_TRUE(result.Wait());
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(VerifyPattern(result.value, 2).ok());
  EXPECT_EQ(result.value.TotalBytes(), static_cast<size_t>(kNewBytes));
  EXPECT_EQ(result.value.data(), (*landing)->data());
  EXPECT_EQ(fast.recvs_asked_again() - again_before, 1);
  EXPECT_EQ(fast.recvs_fetched_by_recv_tensor(), whole_before);
}

// A key whose values grow into the producer's mapped segments comes the
// way the new size does: the value that should now be lent is not asked
// for again as tagged, but fetched by RecvTensor, whose answer teaches the
// key to read. So is each value asked for ahead the old way (read-ahead's
// depth at most); the values after them are lent
// (FastPathLendsValuesInMappedSegments has the settings that lend).
TEST_P(RemoteFastPathTest, FastPathKeyGrowingIntoMappedSegmentsIsLentAfter) {
  const ParsedKey key = Key("grows");
  constexpr int64_t kStep = 85;
  constexpr int64_t kSmall = int64_t{64} << 10;
  constexpr int64_t kLarge = int64_t{1} << 20;
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kUInt8, {kSmall}, 1)}).ok());
  ExpectPattern(kStep, key, 1, static_cast<size_t>(kSmall));
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kUInt8, {kSmall}, 2)}).ok());
  ExpectPattern(kStep, key, 2, static_cast<size_t>(kSmall));
  constexpr uint32_t kLast = 3 + ReadAhead::kMaxValues + 8;
  const double before =
      CounterOf(StatsOf(producer_->address()), "rdv_fast_path_values_lent_total");
  for (uint32_t seed = 3; seed <= kLast; ++seed) {
    ASSERT_TRUE(Produce(kStep, {Item(key, DType::kUInt8, {kLarge}, seed)}).ok());
    ExpectPattern(kStep, key, seed, static_cast<size_t>(kLarge));
  }
  const double lent =
      CounterOf(StatsOf(producer_->address()), "rdv_fast_path_values_lent_total") - before;
  const bool lends = LendsMappedValue(GetParam(), kLarge) && !GetParam().fast_path_writes &&
                     !(GetParam().fast_path_reads && ReadsEveryValue(GetParam()));
  if (lends) {
    EXPECT_GE(lent, 4) << "the values after the stale read-aheads are lent";
  }
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << HeldInAll(Holdings()) << " values still held";
}

// Values the fast path cannot ask for: strings, and values of more
// dimensions than a request carries (as values the producer holds on a GPU,
// which need one to test).
struct OddValue {
  const char* name;
  DType dtype;
  std::vector<int64_t> dims;
};
// Receives the next value of `key` in `step`, of any size, and checks its
// dtype and bytes.
void ExpectPatternOf(Rendezvous& step, const ParsedKey& key, DType dtype, uint32_t seed) {
  Tensor value;
  bool is_dead = true;
  const absl::Status status = step.Recv(key, {}, &value, &is_dead, kWaitLimit);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(value.dtype(), dtype);
  EXPECT_TRUE(VerifyPattern(value, seed).ok()) << "seed " << seed;
}

std::vector<OddValue> OddValues() {
  return {{"string", DType::kString, {3}},
          {"nine_dims", DType::kFloat, std::vector<int64_t>(kFastPathMaxDims + 1, 2)}};
}

// A key whose values cannot come fast keeps to RecvTensor: the answer that
// brings the first such value forgets the key, so that the Recvs after it
// ask no question whose answer can only be "take RecvTensor". The key takes
// the fast path again once its values can; every value comes right.
TEST_P(RemoteFastPathTest, FastPathKeyWhoseValuesCannotComeFastKeepsToRecvTensor) {
  const FastPath& fast = *consumer_->fast_path();
  constexpr int64_t kStep = 81;
  for (const OddValue& odd : OddValues()) {
    SCOPED_TRACE(odd.name);
    const ParsedKey key = Key(absl::StrCat("cannot_", odd.name));
    ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, 1)}).ok());
    ExpectPattern(kStep, key, 1, 32);
    const int64_t fast_before_odd = fast.recvs_started();
    for (uint32_t seed = 2; seed < 5; ++seed) {
      ASSERT_TRUE(Produce(kStep, {Item(key, odd.dtype, odd.dims, seed)}).ok());
      ExpectPatternOf(*consumer_->rendezvous_mgr().Find(kStep), key, odd.dtype, seed);
    }
    // Only the first asks fast (with the shape of before), and is told to
    // fetch the value by RecvTensor, which forgets the key.
    EXPECT_EQ(fast.recvs_started() - fast_before_odd, 1);
    const int64_t fast_before_floats = fast.recvs_started();
    for (uint32_t seed = 5; seed < 10; ++seed) {
      ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, seed)}).ok());
      ExpectPattern(kStep, key, seed, 32);
    }
    EXPECT_GE(fast.recvs_started() - fast_before_floats, 1);
  }
  EXPECT_EQ(fast.refused(), 0);
}

// A FIFO key read ahead whose next value cannot come fast keeps its order:
// the values asked for ahead of it still go to the Recvs after it, which
// take RecvTensor only once none is left.
TEST_P(RemoteFastPathTest, FastPathKeyLeavingItMidFifoKeepsTheOrder) {
  constexpr int64_t kStep = 86;
  constexpr uint32_t kOddSeed = 4;
  constexpr uint32_t kLast = kOddSeed + ReadAhead::kMaxValues + 4;
  for (const OddValue& odd : OddValues()) {
    SCOPED_TRACE(odd.name);
    const ParsedKey key = Key(absl::StrCat("leaves_", odd.name));
    // The first by RecvTensor, the second fast, the third reads ahead.
    for (uint32_t seed = 1; seed < kOddSeed; ++seed) {
      ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {4}, seed)}).ok());
      ExpectPattern(kStep, key, seed, 16);
    }
    std::vector<ProduceItem> items = {Item(key, odd.dtype, odd.dims, kOddSeed)};
    for (uint32_t seed = kOddSeed + 1; seed <= kLast; ++seed) {
      items.push_back(Item(key, DType::kFloat, {4}, seed));
    }
    ASSERT_TRUE(Produce(kStep, std::move(items)).ok());
    ExpectPatternOf(*consumer_->rendezvous_mgr().Find(kStep), key, odd.dtype, kOddSeed);
    for (uint32_t seed = kOddSeed + 1; seed <= kLast; ++seed) {
      ExpectPattern(kStep, key, seed, 16);
    }
  }
  EXPECT_EQ(consumer_->fast_path()->refused(), 0);
}

// A held request asks for a value the producer holds for it after a
// reshaped notice. One naming nothing held (forged, or stale after the
// step's cleanup) is refused and counted there, and only the consumer the
// key's id was given to is told, which refuses it too: it waits for no
// such Recv. The key keeps working.
TEST_P(RemoteFastPathTest, FastPathHeldRequestForNothingHeldIsRefused) {
  const ParsedKey key = Key("held");
  ASSERT_TRUE(Produce(82, {Item(key, DType::kFloat, {4}, 1)}).ok());
  ExpectPattern(82, key, 1, 16);
  absl::StatusOr<std::shared_ptr<WorkerClient>> worker =
      consumer_->worker_cache().Get("/job:worker/replica:0/task:0");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::optional<KnownFastKey> known = (*worker)->fast_keys.Find(key.FullKey());
  ASSERT_TRUE(known.has_value());
  FastRequest request;
  request.key_id = known->id;
  request.step_id = 82;
  request.request_id = 0xfeed;
  request.held = true;
  request.bytes = 16;
  request.dtype = static_cast<int32_t>(DType::kFloat);
  request.num_dims = 1;
  request.dims[0] = 4;
  auto producer_refused = [&] {
    return CounterOf(StatsOf(producer_->address()), "rdv_fast_path_messages_refused_total");
  };
  const double producer_before = producer_refused();
  const int64_t consumer_before = consumer_->fast_path()->refused();
  EXPECT_TRUE(SendForged(*known->producer_transport_address, {EncodeFastRequest(request)}, [&] {
    return producer_refused() == producer_before + 1 &&
           consumer_->fast_path()->refused() == consumer_before + 1;
  })) << "producer refused " << producer_refused() - producer_before << ", consumer "
      << consumer_->fast_path()->refused() - consumer_before;
  ASSERT_TRUE(Produce(82, {Item(key, DType::kFloat, {4}, 2)}).ok());
  ExpectPattern(82, key, 2, 16);
}

// A Recv cancelled after it asked again for a reshaped value (its held
// request: the producer took the value already) loses nothing. Asking for
// itself, it is not withdrawn and ends with that value; reading ahead, it
// ends with the value or CANCELLED, and the next Recv takes the value.
TEST_P(RemoteFastPathWithoutReadAheadTest, FastPathRecvCancelledAfterAskingAgainLosesNoValue) {
  ExpectRecvsCancelledAfterAskingAgainLoseNoValue(/*ends_with_value=*/true);
}

TEST_P(RemoteFastPathTest, FastPathRecvCancelledAfterAskingAgainLosesNoValue) {
  ExpectRecvsCancelledAfterAskingAgainLoseNoValue(/*ends_with_value=*/false);
}

// Above 2 GiB, past protobuf's message limit and any 32-bit length: a
// key's second value of that size comes by the fast path whole (its first
// teaches the shape by RecvTensor). One value at a time, so that a test
// process never holds more than one on each side.
TEST_P(RemoteFastPathTest, FastPathAbove2GiBArrives) {
  const int64_t bytes = (int64_t{1} << 31) + 3;  // 2 GiB and a bit
  if (Capped(bytes) < bytes) GTEST_SKIP() << "RDV_TEST_MAX_BYTES is below 2 GiB and 3 bytes";
  const ParsedKey key = Key("huge");
  ASSERT_TRUE(Produce(80, {Item(key, DType::kUInt8, {bytes}, 1)}).ok());
  ExpectPattern(80, key, 1, static_cast<size_t>(bytes));
  const FastPath& fast = *consumer_->fast_path();
  const int64_t fast_before = fast.recvs_started();
  const int64_t whole_before = fast.recvs_fetched_by_recv_tensor();
  ASSERT_TRUE(Produce(80, {Item(key, DType::kUInt8, {bytes}, 2)}).ok());
  ExpectPattern(80, key, 2, static_cast<size_t>(bytes));
  EXPECT_EQ(fast.recvs_started() - fast_before, 1);
  EXPECT_EQ(fast.recvs_fetched_by_recv_tensor() - whole_before, 0);
}

TEST_P(RemoteFastPathTest, FastPathDeadValueArrivesDead) {
  const ParsedKey key = Key("dies");
  ASSERT_TRUE(Produce(72, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(72, key, 1, 32);
  ProduceItem dead = Item(key, DType::kFloat, {8}, 2);
  dead.set_is_dead(true);
  ASSERT_TRUE(Produce(72, {dead}).ok());
  Tensor value;
  bool is_dead = false;
  ASSERT_TRUE(Recv(72, key, &value, &is_dead).ok());
  EXPECT_TRUE(is_dead);
}

}  // namespace

void RemoteFastPathTest::ExpectRecvsCancelledAfterAskingAgainLoseNoValue(bool ends_with_value) {
  constexpr int64_t kStep = 83;
  const ParsedKey key = Key("recast");
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(kStep, key, 1, 32);
  const FastPath& fast = *consumer_->fast_path();
  const double producer_refused =
      CounterOf(StatsOf(producer_->address()), "rdv_fast_path_messages_refused_total");
  for (uint32_t seed = 2; seed < 12; ++seed) {
    const int64_t elements = 8 + seed;  // another shape than the last value's
    const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
    // Before the value goes: a value read ahead may be asked again at once.
    const int64_t asked_before = fast.recvs_asked_again();
    ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {elements}, seed)}).ok());
    CancellationManager cancel;
    RendezvousArgs args;
    args.cancellation_manager = &cancel;
    RecvResult result;
    consumer_->rendezvous_mgr().Find(kStep)->RecvAsync(key, args, result.Capture());
    // Looked at without a pause, so that the cancellation comes while the
    // held request is on its way: bounded, and it may end first.
    const absl::Time give_up = absl::Now() + rdv::testing::kWaitLimit;
    while (fast.recvs_asked_again() == asked_before && !result.done.HasBeenNotified() &&
           absl::Now() < give_up) {
    }
    ASSERT_GT(fast.recvs_asked_again(), asked_before) << "value " << seed << " was not asked again";
    cancel.StartCancel();
    ASSERT_TRUE(result.Wait()) << seed;
    if (result.status.ok()) {
      EXPECT_EQ(result.value.TotalBytes(), bytes) << seed;
      EXPECT_TRUE(VerifyPattern(result.value, seed).ok()) << seed;
      continue;
    }
    ASSERT_FALSE(ends_with_value) << "value " << seed << ": " << result.status;
    EXPECT_EQ(result.status.code(), absl::StatusCode::kCancelled) << result.status;
    ExpectPattern(kStep, key, seed, bytes);
  }
  EXPECT_EQ(CounterOf(StatsOf(producer_->address()), "rdv_fast_path_messages_refused_total"),
            producer_refused);
  EXPECT_EQ(fast.refused(), 0);
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << HeldInAll(Holdings()) << " values still held";
}

}  // namespace rdv::control::remote_test
