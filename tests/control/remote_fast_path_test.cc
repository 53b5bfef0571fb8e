// The fast path (control/fast_path.h) between this process and a producer
// worker process: a recurring key's Recvs make no RecvTensor call, and are
// right whatever its values do (never come, lose their producer, are
// withdrawn or read ahead); remote_fast_path_metadata_test.cc has the
// values whose dtype or shape changes, remote_fast_path_gpu_test.cc those
// bound for a GPU. Runs for the protocol settings with the fast path on.
#include <algorithm>
#include <csignal>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "control/fast_path.h"
#include "control/read_ahead.h"
#include "control/rpc_remote_rendezvous.h"
#include "core/buffer.h"
#include "tests/control/remote_fast_path.h"

namespace rdv::control::remote_test {
namespace {

// Starts a Recv of `key` in `step` and cancels it at once; false when it
// did not end within the test's wait limit.
bool RecvThenCancel(Rendezvous& step, const ParsedKey& key, RecvResult* result) {
  CancellationManager cancel;
  RendezvousArgs args;
  args.cancellation_manager = &cancel;
  step.RecvAsync(key, args, result->Capture());
  cancel.StartCancel();
  return result->Wait();
}

TEST_P(RemoteFastPathTest, FastPathRecurringKeyMakesNoRecvTensorCall) {
  const ParsedKey key = Key("recurring");
  // Design B registers each fast Recv's destination (of one byte or more)
  // for its one transfer; A registers none.
  const bool writes = GetParam().fast_path_writes || GetParam().needs_rdma;
  const int64_t registered_before = consumer_->data_plane()->put_exposures();
  const int64_t asked_again_before = consumer_->fast_path()->recvs_asked_again();
  int64_t fast_with_bytes = 0;
  for (const int64_t bytes : {int64_t{0}, int64_t{64}, int64_t{1} << 20}) {
    const int64_t step = 60 + bytes % 7;
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, seed)}).ok());
    }
    const int64_t fast_before = consumer_->fast_path()->recvs_started();
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      ExpectPattern(step, key, seed, static_cast<size_t>(bytes));
    }
    // The first value of the first size teaches the key by RecvTensor;
    // every later one comes fast, the first of a new size asked for again.
    const int64_t fast = consumer_->fast_path()->recvs_started() - fast_before;
    EXPECT_GE(fast, 4) << bytes << " bytes";
    if (bytes > 0) fast_with_bytes += fast;
  }
  // The first fast Recv of 64 B asks with the shape it knew, of 0 bytes,
  // and registers nothing; asked again, it registers its new destination,
  // as the first of 1 MiB does unless it is to be lent now (then it is
  // fetched by RecvTensor, which teaches the key to read).
  const int64_t asked_again = consumer_->fast_path()->recvs_asked_again() - asked_again_before;
  EXPECT_GE(asked_again, 1);
  EXPECT_LE(asked_again, 2);
  EXPECT_EQ(consumer_->data_plane()->put_exposures() - registered_before,
            writes ? fast_with_bytes - 1 + asked_again : 0);
}

// Between processes of one host, values in the producer's mapped segments
// are lent for the consumer to copy (design D) and released; smaller ones
// are still sent tagged. Over tcp or RDMA, or with writes forced, none is
// lent unless the consumer reads every value.
TEST_P(RemoteFastPathTest, FastPathLendsValuesInMappedSegments) {
  for (const int64_t bytes : {int64_t{64} << 10, int64_t{1} << 20}) {
    const ParsedKey key = Key(absl::StrCat("lent", bytes));
    constexpr int64_t kStep = 78;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      ASSERT_TRUE(Produce(kStep, {Item(key, DType::kUInt8, {bytes}, seed)}).ok());
    }
    const double before =
        CounterOf(StatsOf(producer_->address()), "rdv_fast_path_values_lent_total");
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      ExpectPattern(kStep, key, seed, static_cast<size_t>(bytes));
    }
    const double lent =
        CounterOf(StatsOf(producer_->address()), "rdv_fast_path_values_lent_total") - before;
    const bool lends = (GetParam().fast_path_reads && ReadsEveryValue(GetParam())) ||
                       (LendsMappedValue(GetParam(), bytes) && !GetParam().fast_path_writes);
    // The first value teaches the key; the other three come fast.
    EXPECT_EQ(lent, lends ? 3 : 0) << bytes << " bytes";
  }
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << "every value read was released, but " << HeldInAll(Holdings()) << " are still held";
}

// What an embedder may stage a value in (the torch backend's large sends):
// memory the consumer reads itself, given exactly where values there are
// lent, and never below the segments' size.
TEST_P(RemoteFastPathTest, PeerReadableMemoryOnlyWhereValuesThereAreLent) {
  for (const int64_t bytes : {int64_t{64} << 10, int64_t{1} << 20}) {
    absl::StatusOr<TensorShape> shape = TensorShape::Create({bytes});
    ASSERT_TRUE(shape.ok()) << shape.status();
    const std::optional<Tensor> staging = consumer_->AllocatePeerReadable(DType::kUInt8, *shape);
    EXPECT_EQ(staging.has_value(), LendsMappedValue(GetParam(), bytes)) << bytes << " bytes";
    if (staging.has_value()) {
      EXPECT_EQ(staging->TotalBytes(), static_cast<size_t>(bytes));
    }
  }
}

// A pool out of segments gives no such memory for the moment, and gives it
// again once a staged value is let go: a shortage passes, it never turns
// staging off.
TEST_P(RemoteFastPathTest, PeerReadableMemoryComesBackAfterAShortage) {
  if (!LendsMappedValues(GetParam())) GTEST_SKIP() << "no memory here is read by peer copy";
  const absl::StatusOr<TensorShape> shape =
      TensorShape::Create({static_cast<int64_t>(ucx_plugin::kMinSegmentBytes)});
  ASSERT_TRUE(shape.ok()) << shape.status();
  std::vector<Tensor> held;
  while (held.size() <= static_cast<size_t>(ucx_plugin::kMaxSegments)) {
    std::optional<Tensor> staging = consumer_->AllocatePeerReadable(DType::kUInt8, *shape);
    if (!staging.has_value()) break;
    held.push_back(*std::move(staging));
  }
  ASSERT_LE(held.size(), static_cast<size_t>(ucx_plugin::kMaxSegments))
      << "the segments never ran out";
  ASSERT_FALSE(held.empty());
  EXPECT_FALSE(consumer_->AllocatePeerReadable(DType::kUInt8, *shape).has_value());
  held.pop_back();
  EXPECT_TRUE(consumer_->AllocatePeerReadable(DType::kUInt8, *shape).has_value())
      << "a segment let go was not given again";
}

TEST_P(RemoteFastPathTest, FastPathAsyncRecvsOfOneKeyAllArrive) {
  const ParsedKey key = Key("async");
  constexpr int kValues = 16;
  ASSERT_TRUE(Produce(70, {Item(key, DType::kFloat, {1024}, 1)}).ok());
  ExpectPattern(70, key, 1, 4096);
  std::vector<ProduceItem> items;
  for (int i = 0; i < kValues; ++i) items.push_back(Item(key, DType::kFloat, {1024}, 7));
  ASSERT_TRUE(Produce(70, items).ok());
  std::vector<RecvResult> results(kValues);
  // A failed wait returns early: the Recvs still out must end before their
  // results go, or their callbacks would write to freed memory.
  absl::Cleanup end_recvs = [&] {
    consumer_->rendezvous_mgr().Find(70)->StartAbort(absl::AbortedError("the test ended"));
    for (RecvResult& result : results) EXPECT_TRUE(result.Wait());
  };
  for (RecvResult& result : results) {
    consumer_->rendezvous_mgr().Find(70)->RecvAsync(key, {}, result.Capture());
  }
  for (RecvResult& result : results) {
    ASSERT_TRUE(result.Wait());
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_TRUE(VerifyPattern(result.value, 7).ok());
  }
  EXPECT_EQ(consumer_->fast_path()->refused(), 0);
}

// A fast Recv's landing buffer of the value's size is its destination: the
// tagged send writes there and nothing copies after. One of another size
// is left alone. The value is larger than what is read ahead for a Recv
// with a landing buffer, so each Recv asks for itself.
TEST_P(RemoteFastPathTest, FastPathRecvLandsInTheCallersBuffer) {
  const ParsedKey key = Key("lands");
  constexpr int64_t kBytes = int64_t{512} << 10;
  static_assert(kBytes > ReadAhead::kMaxLandedValueBytes);
  ASSERT_TRUE(Produce(76, {Item(key, DType::kUInt8, {kBytes}, 1)}).ok());
  ExpectPattern(76, key, 1, static_cast<size_t>(kBytes));
  for (const bool fits : {true, false}) {
    auto landing = Buffer::Allocate(HostAllocator(), static_cast<size_t>(fits ? kBytes : kBytes + 64));
    ASSERT_TRUE(landing.ok());
    std::memset((*landing)->data(), 0xAB, (*landing)->size());
    RendezvousArgs args;
    args.landing = *landing;
    const int64_t fast_before = consumer_->fast_path()->recvs_started();
    RecvResult result;
    consumer_->rendezvous_mgr().Find(76)->RecvAsync(key, args, result.Capture());
    ASSERT_TRUE(Produce(76, {Item(key, DType::kUInt8, {kBytes}, 2)}).ok());
    ASSERT_TRUE(result.Wait());
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(consumer_->fast_path()->recvs_started() - fast_before, 1);
    EXPECT_TRUE(VerifyPattern(result.value, 2).ok());
    EXPECT_EQ(result.value.data() == (*landing)->data(), fits);
    if (!fits) {
      const auto* untouched = static_cast<const unsigned char*>((*landing)->data());
      EXPECT_EQ(std::count(untouched, untouched + (*landing)->size(), 0xAB),
                static_cast<std::ptrdiff_t>((*landing)->size()));
    }
  }
}

// A fast Recv whose value never comes ends with the step's abort, its own
// timeout and its cancellation, promptly, and the key keeps working.
TEST_P(RemoteFastPathTest, FastPathRecvEndsByAbortTimeoutAndCancel) {
  const ParsedKey key = Key("never");
  ASSERT_TRUE(Produce(73, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(73, key, 1, 32);
  Tensor value;
  bool is_dead = false;
  EXPECT_EQ(Recv(73, key, &value, &is_dead, absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  RecvResult cancelled;
  ASSERT_TRUE(RecvThenCancel(*consumer_->rendezvous_mgr().Find(73), key, &cancelled));
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
  RecvResult aborted;
  consumer_->rendezvous_mgr().Find(73)->RecvAsync(key, {}, aborted.Capture());
  consumer_->rendezvous_mgr().Find(73)->StartAbort(absl::AbortedError("the step failed"));
  ASSERT_TRUE(aborted.Wait());
  EXPECT_EQ(aborted.status.code(), absl::StatusCode::kAborted) << aborted.status;
  // Another step: the key's next value still arrives, fast.
  ASSERT_TRUE(Produce(74, {Item(key, DType::kFloat, {8}, 9)}).ok());
  ExpectPattern(74, key, 9, 32);
}

// A fast Recv that times out or is cancelled is withdrawn at the producer
// before it ends: the values sent after it go to the next Recvs, in order.
// A withdrawal that crosses its value loses nothing either: the Recv ends
// with the value, or the value waits for the next Recv. Each Recv asks the
// producer itself (read-ahead off).
TEST_P(RemoteFastPathWithoutReadAheadTest, FastPathWithdrawnRecvLosesNoValue) {
  ExpectWithdrawnRecvsLoseNoValue(/*fast_recvs=*/10);
}

// With read-ahead, a cancelled Recv gives back the value it waited for,
// and the next Recv takes it: the same promise.
TEST_P(RemoteFastPathTest, FastPathWithdrawnRecvLosesNoValue) {
  ExpectWithdrawnRecvsLoseNoValue(/*fast_recvs=*/std::nullopt);
}


// A key received several times in a step is read ahead: its values come
// in the order they were sent, whatever they do (change shape, die, come
// before or after their Recvs). At the step's cleanup the values read
// ahead and the requests still waiting end on both sides, and the key
// works in the next step.
TEST_P(RemoteFastPathTest, FastPathReadAheadKeepsAFifoKeysOrder) {
  constexpr int64_t kStep = 79;
  const ParsedKey key = Key("fifo");
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {16}, 1)}).ok());
  ExpectPattern(kStep, key, 1, 64);
  const int64_t ahead_before = consumer_->fast_path()->read_ahead();
  constexpr uint32_t kLast = 40;
  constexpr uint32_t kDead = 25;
  auto floats = [](uint32_t seed) { return seed % 10 == 0 ? int64_t{32} : int64_t{16}; };
  std::vector<ProduceItem> items;
  for (uint32_t seed = 2; seed <= kLast; ++seed) {
    items.push_back(Item(key, DType::kFloat, {floats(seed)}, seed));
    items.back().set_is_dead(seed == kDead);
  }
  const auto later = items.begin() + 20;
  ASSERT_TRUE(Produce(kStep, {items.begin(), later}).ok());
  for (uint32_t seed = 2; seed <= kLast; ++seed) {
    if (seed == 22) {  // the first 20 were received: read-aheads wait for these
      ASSERT_TRUE(Produce(kStep, {later, items.end()}).ok());
    }
    if (seed != kDead) {
      ExpectPattern(kStep, key, seed, static_cast<size_t>(floats(seed)) * 4);
      continue;
    }
    Tensor value;
    bool is_dead = false;
    ASSERT_TRUE(Recv(kStep, key, &value, &is_dead).ok());
    EXPECT_TRUE(is_dead);
  }
  EXPECT_GT(consumer_->fast_path()->read_ahead() - ahead_before, 0);
  EXPECT_EQ(consumer_->fast_path()->refused(), 0);

  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {16}, 90)}).ok());  // never received
  auto ended = std::static_pointer_cast<RpcRemoteRendezvous>(
      consumer_->rendezvous_mgr().Find(kStep));
  EXPECT_GT(ended->CountRemoteCalls(), 0u) << "no value was asked for ahead";
  consumer_->rendezvous_mgr().Cleanup(kStep);
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return ended->CountRemoteCalls() == 0; }))
      << ended->CountRemoteCalls() << " read-ahead calls outlived their step";
  WorkerCall([&](grpc::ClientContext* context) {
    CleanupStepRequest request;
    request.set_step_id(kStep);
    CleanupStepResponse response;
    return worker_stub_->CleanupStep(context, request, &response);
  });
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << HeldInAll(Holdings()) << " values still held after the step's cleanup";
  ASSERT_TRUE(Produce(kStep + 1, {Item(key, DType::kFloat, {16}, 91)}).ok());
  ExpectPattern(kStep + 1, key, 91, 64);
}

// A deep key's read-ahead asks for half its depth at a time, the requests
// of each top-up together (as many messages as the transport's size needs):
// far fewer messages than Recvs, and every value right, in order.
TEST_P(RemoteFastPathTest, FastPathReadAheadAsksInBatches) {
  constexpr int64_t kStep = 84;
  const ParsedKey key = Key("batched");
  const FastPath& fast = *consumer_->fast_path();
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {16}, 1)}).ok());
  ExpectPattern(kStep, key, 1, 64);
  const int64_t started_before = fast.recvs_started();
  const int64_t messages_before = fast.request_messages();
  std::vector<ProduceItem> items;
  for (uint32_t seed = 2; seed < 66; ++seed) items.push_back(Item(key, DType::kFloat, {16}, seed));
  ASSERT_TRUE(Produce(kStep, items).ok());
  for (uint32_t seed = 2; seed < 66; ++seed) ExpectPattern(kStep, key, seed, 64);
  const int64_t started = fast.recvs_started() - started_before;
  const int64_t messages = fast.request_messages() - messages_before;
  EXPECT_GE(started, 64);
  EXPECT_LE(messages * 2, started) << messages << " messages for " << started << " requests";
  EXPECT_EQ(fast.refused(), 0);
}

// A producer keeps at most FastPath::kMaxWaitingRequests requests waiting;
// the Recvs past that are told to ask by RecvTensor, and every value still
// arrives, right. The Recvs read ahead: a read-ahead the producer does not
// serve takes no value by RecvTensor (none is left waiting for a value
// another took), and the Recv that claims its slot asks for itself.
TEST_P(RemoteFastPathTest, FastPathBoundsTheRequestsWaitingAtTheProducer) {
  constexpr int64_t kStep = 77;
  constexpr size_t kOver = 16;
  constexpr size_t kRecvs = FastPath::kMaxWaitingRequests + kOver;
  const ParsedKey key = Key("crowded");
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(kStep, key, 1, 32);
  const GetStatsResponse before = StatsOf(producer_->address());
  std::vector<RecvResult> results(kRecvs);
  absl::Cleanup end_recvs = [&] {
    consumer_->rendezvous_mgr().Find(kStep)->StartAbort(absl::AbortedError("the test ended"));
    for (RecvResult& result : results) EXPECT_TRUE(result.Wait());
  };
  for (RecvResult& result : results) {
    consumer_->rendezvous_mgr().Find(kStep)->RecvAsync(key, {}, result.Capture());
  }
  // Every request has reached the producer (and waits, or was sent to
  // RecvTensor) before the values come, so that the bound is what it meets.
  auto grew = [&](const GetStatsResponse& now, absl::string_view name) {
    return CounterOf(now, name) - CounterOf(before, name);
  };
  ASSERT_TRUE(rdv::testing::PollUntil([&] {
    const GetStatsResponse now = StatsOf(producer_->address());
    return grew(now, "rdv_fast_path_requests_served_total") >= FastPath::kMaxWaitingRequests &&
           grew(now, "rdv_fast_path_requests_overflowed_total") >= kOver;
  }));
  std::vector<ProduceItem> items(kRecvs, Item(key, DType::kFloat, {8}, 5));
  ASSERT_TRUE(Produce(kStep, items).ok());
  for (RecvResult& result : results) {
    ASSERT_TRUE(result.Wait());
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_TRUE(VerifyPattern(result.value, 5).ok());
  }
  const GetStatsResponse after = StatsOf(producer_->address());
  auto sent = [&](absl::string_view path) {
    return path.empty() ? CounterOf(after, "rdv_sent_transfers_total") -
                              CounterOf(before, "rdv_sent_transfers_total")
                        : CounterOf(after, "rdv_sent_transfers_total", "path", path) -
                              CounterOf(before, "rdv_sent_transfers_total", "path", path);
  };
  EXPECT_EQ(sent(""), kRecvs);
  EXPECT_EQ(sent("fast_path"), FastPath::kMaxWaitingRequests)
      << "the requests past the bound took RecvTensor";
}

// Messages from anyone who reaches the worker's transport: garbage, and
// well-formed ones naming no key id, request or awaited write, are
// dropped and counted; a Recv of the key still comes right after them.
TEST_P(RemoteFastPathTest, FastPathForgedMessagesAreRefusedAndCounted) {
  const ParsedKey key = Key("forged");
  ASSERT_TRUE(Produce(77, {Item(key, DType::kUInt8, {1 << 16}, 1)}).ok());
  ExpectPattern(77, key, 1, 1 << 16);
  FastRequest request;
  request.key_id = 0x5eed;  // not an id this worker issued
  request.put = true;
  const std::vector<std::string> forged = {
      "not a fast-path message",
      EncodeFastNotice({0xbad, FastNoticeKind::kLanded, 0, ""}),
      EncodeFastNotice({0xbad, FastNoticeKind::kFailed, 10, "forged"}),
      EncodeFastRequest(request),
      EncodeFastWithdrawal({0x5eed, 77, 1}),
      EncodeFastNotice({0xbad, FastNoticeKind::kReadable, 0, ""}),
      EncodeFastRelease({0x5eed, 77, 1, 64})};
  const int64_t refused_before = consumer_->fast_path()->refused();
  EXPECT_TRUE(SendForged(consumer_->data_plane()->local_address(), forged, [&] {
    return consumer_->fast_path()->refused() - refused_before ==
           static_cast<int64_t>(forged.size());
  })) << consumer_->fast_path()->refused() - refused_before << " of " << forged.size();
  ASSERT_TRUE(Produce(77, {Item(key, DType::kUInt8, {1 << 16}, 2)}).ok());
  ExpectPattern(77, key, 2, 1 << 16);
}

// ProducerLostMidTransferFailsTheRecvWithinThePeerTimeout, on the fast
// path: the consumer's own endpoint to the producer carries its requests.
TEST_P(RemoteFastPathTest, FastPathProducerLostMidTransferFailsTheRecv) {
  const int64_t fast_before = consumer_->fast_path()->recvs_started();
  ExpectLossMidTransferFailsTheRecv(/*blocking=*/false, /*recurring=*/true);
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_GT(consumer_->fast_path()->recvs_started(), fast_before)
      << "the stalled Recv did not take the fast path";
}

// The producer dies while a fast Recv waits: UNAVAILABLE within the peer
// timeout (its PeerWatch), never a hang.
TEST_P(RemoteFastPathTest, FastPathProducerDeathFailsTheRecv) {
  const ParsedKey key = Key("orphaned");
  ASSERT_TRUE(Produce(75, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(75, key, 1, 32);
  RecvResult waiting;
  consumer_->rendezvous_mgr().Find(75)->RecvAsync(key, {}, waiting.Capture());
  ASSERT_TRUE(rdv::testing::PollUntil(
      [&] { return consumer_->fast_path()->recvs_started() >= 1; }));
  const absl::Time killed = absl::Now();
  producer_->Kill();
  ASSERT_TRUE(waiting.Wait()) << "a fast Recv hangs on a dead producer";
  EXPECT_EQ(waiting.status.code(), absl::StatusCode::kUnavailable) << waiting.status;
  EXPECT_LT(absl::Now() - killed, kPeerTimeout + absl::Seconds(3));
  producer_.reset();
}

}  // namespace

::testing::AssertionResult RemoteFastPathTest::SendForged(
    const std::string& address, const std::vector<std::string>& messages,
    absl::FunctionRef<bool()> all_refused) {
  const plugin::Transport& transport = consumer_->data_plane()->transport();
  auto forger = plugin::Transport::Load(transport.name(), TransportSettingsOf(GetParam()));
  if (!forger.ok()) return ::testing::AssertionFailure() << forger.status();
  auto endpoint = (*forger)->Connect(address);
  if (!endpoint.ok()) return ::testing::AssertionFailure() << endpoint.status();
  for (const std::string& message : messages) {
    Notification sent;
    absl::Status sent_status;
    (*forger)->SendMessage(**endpoint, message, [&](absl::Status status) {
      sent_status = std::move(status);
      sent.Notify();
    });
    if (!sent.WaitForNotificationWithTimeout(kWaitLimit)) {
      return ::testing::AssertionFailure() << "a forged message was not sent in time";
    }
    if (!sent_status.ok()) return ::testing::AssertionFailure() << sent_status;
  }
  const bool refused = rdv::testing::PollUntil([&] { return all_refused(); });
  endpoint->reset();
  if (!refused) return ::testing::AssertionFailure() << "not every forged message was refused";
  return ::testing::AssertionSuccess();
}

void RemoteFastPathTest::ExpectWithdrawnRecvsLoseNoValue(std::optional<int64_t> fast_recvs) {
  constexpr int64_t kStep = 76;
  const ParsedKey key = Key("withdrawn");
  ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, 1)}).ok());
  ExpectPattern(kStep, key, 1, 32);
  const double producer_refused =
      CounterOf(StatsOf(producer_->address()), "rdv_fast_path_messages_refused_total");
  const int64_t fast_before = consumer_->fast_path()->recvs_started();
  Tensor value;
  bool is_dead = false;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Recv(kStep, key, &value, &is_dead, absl::Milliseconds(20)).code(),
              absl::StatusCode::kDeadlineExceeded);
    RecvResult cancelled;
    ASSERT_TRUE(RecvThenCancel(*consumer_->rendezvous_mgr().Find(kStep), key, &cancelled));
    EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
  }
  if (fast_recvs.has_value()) {
    EXPECT_EQ(consumer_->fast_path()->recvs_started() - fast_before, *fast_recvs);
  }
  for (uint32_t seed = 2; seed <= 4; ++seed) {
    ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, seed)}).ok());
  }
  for (uint32_t seed = 2; seed <= 4; ++seed) ExpectPattern(kStep, key, seed, 32);
  for (uint32_t seed = 10; seed < 30; ++seed) {
    ASSERT_TRUE(Produce(kStep, {Item(key, DType::kFloat, {8}, seed)}).ok());
    RecvResult crossed;
    ASSERT_TRUE(RecvThenCancel(*consumer_->rendezvous_mgr().Find(kStep), key, &crossed));
    if (crossed.status.ok()) {
      EXPECT_TRUE(VerifyPattern(crossed.value, seed).ok()) << seed;
      continue;
    }
    EXPECT_EQ(crossed.status.code(), absl::StatusCode::kCancelled) << crossed.status;
    ExpectPattern(kStep, key, seed, 32);
  }
  EXPECT_EQ(CounterOf(StatsOf(producer_->address()), "rdv_fast_path_messages_refused_total"),
            producer_refused);
  EXPECT_EQ(consumer_->fast_path()->refused(), 0);
}

}  // namespace rdv::control::remote_test
