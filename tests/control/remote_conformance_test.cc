// The cross-process conformance suite (tests/control/remote_conformance.h):
// Send and Recv in every order and size, cleanup, abort, timeouts; and its
// instantiation for every protocol.
#include "tests/control/remote_conformance.h"

#include <algorithm>
#include <cstring>

#include "control/data_plane.h"
#include "core/buffer.h"
#include "tests/control/remote_fast_path.h"

namespace rdv::control::remote_test {
namespace {

TEST_P(RemoteConformanceTest, SendBeforeRecv) {
  const ParsedKey key = Key("a");
  ASSERT_TRUE(Produce(1, {Item(key, DType::kFloat, {2, 3}, 7)}).ok());
  Tensor value;
  bool is_dead = true;
  ASSERT_TRUE(Recv(1, key, &value, &is_dead).ok());
  EXPECT_FALSE(is_dead);
  EXPECT_EQ(value.dtype(), DType::kFloat);
  EXPECT_EQ(value.shape(), *TensorShape::Create({2, 3}));
  EXPECT_TRUE(VerifyPattern(value, 7).ok());
}

TEST_P(RemoteConformanceTest, RecvBeforeSend) {
  const ParsedKey key = Key("b");
  RecvResult result;
  consumer_->rendezvous_mgr().Find(2)->RecvAsync(key, {}, result.Capture());
  ASSERT_TRUE(Produce(2, {Item(key, DType::kInt32, {100}, 3)}).ok());
  ASSERT_TRUE(result.Wait());
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(VerifyPattern(result.value, 3).ok());
}

// A landing buffer of the value's size gets the bytes of a tagged send,
// where nothing copies them afterwards; one of another size is left alone.
// A get reads into registered memory, the stream into rdv's own.
TEST_P(RemoteConformanceTest, RecvLandsInTheCallersBuffer) {
  const DataPlane* plane = consumer_->data_plane();
  int64_t step = 40;
  for (const int64_t bytes : {int64_t{4} << 10, int64_t{1} << 20}) {
    const bool tagged = plane != nullptr && plane->transfer_op() == TRANSFER_OP_TAG &&
                        static_cast<size_t>(bytes) > plane->options().inline_bytes;
    for (const bool fits : {true, false}) {
      const ParsedKey key = Key(absl::StrCat("landing", bytes, fits));
      auto landing =
          Buffer::Allocate(HostAllocator(), static_cast<size_t>(fits ? bytes : bytes + 64));
      ASSERT_TRUE(landing.ok());
      std::memset((*landing)->data(), 0xAB, (*landing)->size());
      RendezvousArgs args;
      args.landing = *landing;
      RecvResult result;
      consumer_->rendezvous_mgr().Find(step)->RecvAsync(key, args, result.Capture());
      ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, 9)}).ok());
      ASSERT_TRUE(result.Wait());
      ASSERT_TRUE(result.status.ok()) << bytes << ": " << result.status;
      EXPECT_TRUE(VerifyPattern(result.value, 9).ok()) << bytes;
      EXPECT_EQ(result.value.data() == (*landing)->data(), fits && tagged) << bytes << " " << fits;
      if (!fits) {
        const auto* untouched = static_cast<const unsigned char*>((*landing)->data());
        EXPECT_EQ(std::count(untouched, untouched + (*landing)->size(), 0xAB),
                  static_cast<std::ptrdiff_t>((*landing)->size()));
      }
      ++step;
    }
  }
}

TEST_P(RemoteConformanceTest, ManySendsOnOneKeyArriveInOrder) {
  const ParsedKey key = Key("fifo");
  std::vector<ProduceItem> items;
  for (uint32_t seed = 0; seed < 20; ++seed) items.push_back(Item(key, DType::kUInt8, {64}, seed));
  ASSERT_TRUE(Produce(3, items).ok());
  for (uint32_t seed = 0; seed < 20; ++seed) {
    Tensor value;
    bool is_dead;
    ASSERT_TRUE(Recv(3, key, &value, &is_dead).ok());
    EXPECT_TRUE(VerifyPattern(value, seed).ok()) << "value " << seed << " out of order";
  }
}

TEST_P(RemoteConformanceTest, ThousandKeysInFlight) {
  constexpr int kKeys = 1000;
  std::vector<ParsedKey> keys;
  std::vector<RecvResult> results(kKeys);
  std::vector<ProduceItem> items;
  auto rendezvous = consumer_->rendezvous_mgr().Find(4);
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(Key(absl::StrCat("k", i)));
    rendezvous->RecvAsync(keys.back(), {}, results[i].Capture());
    items.push_back(Item(keys.back(), DType::kInt64, {i % 7 + 1}, static_cast<uint32_t>(i)));
  }
  ASSERT_TRUE(Produce(4, items).ok());
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(results[i].Wait()) << i;
    ASSERT_TRUE(results[i].status.ok()) << results[i].status;
    EXPECT_TRUE(VerifyPattern(results[i].value, static_cast<uint32_t>(i)).ok()) << i;
  }
}

TEST_P(RemoteConformanceTest, SizesArriveByteExact) {
  int64_t step = 10;
  for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{4} << 10, int64_t{1} << 20,
                        Capped(int64_t{256} << 20)}) {
    const ParsedKey key = Key(absl::StrCat("size", bytes));
    ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, 11)}).ok());
    Tensor value;
    bool is_dead;
    const absl::Status status = Recv(step, key, &value, &is_dead);
    ASSERT_TRUE(status.ok()) << bytes << ": " << status;
    EXPECT_EQ(value.TotalBytes(), static_cast<size_t>(bytes));
    EXPECT_TRUE(VerifyPattern(value, 11).ok()) << bytes;
    ++step;
  }
}

// Above protobuf's 2 GiB message limit: the stream carries it in chunks.
TEST_P(RemoteConformanceTest, Above2GiBArrives) {
  const int64_t bytes = (int64_t{1} << 31) + 3;  // 2 GiB and a bit
  if (Capped(bytes) < bytes) GTEST_SKIP() << "RDV_TEST_MAX_BYTES is below 2 GiB and 3 bytes";
  const ParsedKey key = Key("huge");
  ASSERT_TRUE(Produce(15, {Item(key, DType::kUInt8, {bytes}, 13)}).ok());
  Tensor value;
  bool is_dead;
  const absl::Status status = Recv(15, key, &value, &is_dead);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(value.TotalBytes(), static_cast<size_t>(bytes));
  EXPECT_TRUE(VerifyPattern(value, 13).ok());
}

TEST_P(RemoteConformanceTest, EveryDType) {
  for (const DType dtype : {DType::kFloat, DType::kDouble, DType::kInt8, DType::kInt16,
                            DType::kInt32, DType::kInt64, DType::kUInt8, DType::kUInt16,
                            DType::kUInt32, DType::kUInt64, DType::kBool, DType::kHalf,
                            DType::kBFloat16, DType::kComplex64, DType::kComplex128,
                            DType::kString}) {
    const ParsedKey key = Key(absl::StrCat("dtype", static_cast<int>(dtype)));
    ASSERT_TRUE(Produce(20, {Item(key, dtype, {3, 5}, 5)}).ok());
    Tensor value;
    bool is_dead;
    ASSERT_TRUE(Recv(20, key, &value, &is_dead).ok()) << DTypeName(dtype);
    EXPECT_EQ(value.dtype(), dtype);
    EXPECT_TRUE(VerifyPattern(value, 5).ok()) << DTypeName(dtype);
  }
}

TEST_P(RemoteConformanceTest, IsDeadPassesThrough) {
  const ParsedKey key = Key("dead");
  ProduceItem item = Item(key, DType::kFloat, {1}, 0);
  item.set_is_dead(true);
  ASSERT_TRUE(Produce(21, {item}).ok());
  Tensor value;
  bool is_dead = false;
  ASSERT_TRUE(Recv(21, key, &value, &is_dead).ok());
  EXPECT_TRUE(is_dead);
}

TEST_P(RemoteConformanceTest, StepCleanupDropsUnconsumedSends) {
  const ParsedKey key = Key("dropped");
  ASSERT_TRUE(Produce(22, {Item(key, DType::kUInt8, {16}, 1)}).ok());
  WorkerCall([&](grpc::ClientContext* context) {
    CleanupStepRequest request;
    request.set_step_id(22);
    CleanupStepResponse response;
    return worker_stub_->CleanupStep(context, request, &response);
  });
  ASSERT_TRUE(Produce(22, {Item(key, DType::kUInt8, {16}, 2)}).ok());
  Tensor value;
  bool is_dead;
  ASSERT_TRUE(Recv(22, key, &value, &is_dead).ok());
  EXPECT_TRUE(VerifyPattern(value, 2).ok()) << "the value sent before cleanup was not dropped";
}

TEST_P(RemoteConformanceTest, ConsumerCleanupFailsPendingRecv) {
  RecvResult result;
  consumer_->rendezvous_mgr().Find(23)->RecvAsync(Key("never"), {}, result.Capture());
  consumer_->rendezvous_mgr().Cleanup(23);
  ASSERT_TRUE(result.Wait());
  EXPECT_EQ(result.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(result.status.message(), "Cleanup 23");
}

TEST_P(RemoteConformanceTest, AbortStepFailsPendingRecvsEverywhere) {
  RecvResult remote, local;
  auto rendezvous = consumer_->rendezvous_mgr().Find(24);
  rendezvous->RecvAsync(Key("pending"), {}, remote.Capture());
  rendezvous->RecvAsync(*ParsedKey::Parse(CreateRendezvousKey(kConsumerCpu, 1, kConsumerCpu, "own")),
                        {}, local.Capture());
  WorkerCall([&](grpc::ClientContext* context) {
    AbortStepRequest request;
    request.set_step_id(24);
    request.set_code(static_cast<int>(absl::StatusCode::kAborted));
    request.set_message("partition 3 failed");
    request.set_propagate(true);
    AbortStepResponse response;
    return worker_stub_->AbortStep(context, request, &response);
  });
  ASSERT_TRUE(remote.Wait());
  EXPECT_EQ(remote.status.code(), absl::StatusCode::kAborted) << remote.status;
  EXPECT_EQ(remote.status.message(), "partition 3 failed");
  ASSERT_TRUE(local.Wait()) << "the abort did not reach the consumer worker";
  EXPECT_EQ(local.status.code(), absl::StatusCode::kAborted) << local.status;
  EXPECT_EQ(local.status.message(), "partition 3 failed");
}

TEST_P(RemoteConformanceTest, TimedOutRecvIsWithdrawnAtTheProducer) {
  const ParsedKey key = Key("late");
  Tensor value;
  bool is_dead;
  EXPECT_EQ(Recv(25, key, &value, &is_dead, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(Produce(25, {Item(key, DType::kUInt8, {8}, 4)}).ok());
  ASSERT_TRUE(Recv(25, key, &value, &is_dead).ok()) << "the late value was lost";
  EXPECT_TRUE(VerifyPattern(value, 4).ok());
}

// Each end counts what moved (docs/stats.md): the producer the value and
// the path it took, the consumer the Recv, its bytes and latency, and a
// failed Recv by its code.
TEST_P(RemoteConformanceTest, StatsCountWhatMovedAndHow) {
  constexpr int64_t kBytes = 512 << 10;
  const GetStatsResponse producer_before = StatsOf(producer_->address());
  const GetStatsResponse consumer_before = StatsOf(consumer_->address());
  const ParsedKey key = Key("counted");
  ASSERT_TRUE(Produce(28, {Item(key, DType::kUInt8, {kBytes}, 7)}).ok());
  Tensor value;
  bool is_dead;
  ASSERT_TRUE(Recv(28, key, &value, &is_dead).ok());
  EXPECT_EQ(Recv(28, Key("never"), &value, &is_dead, absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  const GetStatsResponse producer = StatsOf(producer_->address());
  const GetStatsResponse consumer = StatsOf(consumer_->address());
  auto grew = [](const GetStatsResponse& before, const GetStatsResponse& after,
                 absl::string_view name, absl::string_view label = "",
                 absl::string_view label_value = "") {
    return CounterOf(after, name, label, label_value) - CounterOf(before, name, label, label_value);
  };
  EXPECT_EQ(producer.worker_name(), "/job:worker/replica:0/task:0");
  EXPECT_EQ(grew(producer_before, producer, "rdv_sent_transfers_total"), 1);
  EXPECT_EQ(grew(producer_before, producer, "rdv_sent_bytes_total"), kBytes);
  // Protocol grpc answers with the value; the others move it through the
  // data plane, however their transport does it.
  const bool through_stream = GetParam().protocol == "grpc";
  EXPECT_EQ(grew(producer_before, producer, "rdv_sent_transfers_total", "path", "inline"),
            through_stream ? 1 : 0);
  EXPECT_EQ(grew(consumer_before, consumer, "rdv_received_transfers_total"), 1);
  EXPECT_EQ(grew(consumer_before, consumer, "rdv_received_bytes_total"), kBytes);
  EXPECT_EQ(grew(consumer_before, consumer, "rdv_recv_latency_seconds_count", "size_class",
                 "le_1MiB"),
            1);
  EXPECT_EQ(grew(consumer_before, consumer, "rdv_recv_errors_total", "code",
                 "DEADLINE_EXCEEDED"),
            1);
  EXPECT_EQ(CounterOf(consumer, "rdv_recvs_in_flight"), 0);
}

// Through a data plane, each value leaves by what its memory allows: read
// by the consumer where the transport is read from, or where the value
// lies in a mapped segment a same-host consumer copies itself; else sent
// tagged.
TEST_P(RemoteConformanceTest, EachValueLeavesByWhatItsMemoryAllows) {
  if (!HasDataPlane(GetParam())) GTEST_SKIP() << "protocol grpc streams every value";
  for (const int64_t bytes : {int64_t{128} << 10, int64_t{1} << 20}) {
    const GetStatsResponse before = StatsOf(producer_->address());
    const ParsedKey key = Key(absl::StrCat("leaves", bytes));
    ASSERT_TRUE(Produce(29, {Item(key, DType::kUInt8, {bytes}, 3)}).ok());
    ExpectPattern(29, key, 3, static_cast<size_t>(bytes));
    const GetStatsResponse after = StatsOf(producer_->address());
    const bool read = ReadsEveryValue(GetParam()) || LendsMappedValue(GetParam(), bytes);
    for (const char* path : {"transport_get", "transport_tag"}) {
      const double sent = CounterOf(after, "rdv_sent_transfers_total", "path", path) -
                          CounterOf(before, "rdv_sent_transfers_total", "path", path);
      EXPECT_EQ(sent, (std::string_view(path) == "transport_get") == read ? 1 : 0)
          << bytes << " bytes by " << path;
    }
  }
}

// A cancelled Recv leaves its channel at the producer too: the value sent
// after it reaches the next Recv, every time: cancelled at once, or once
// its request waits at the producer (the pause only makes that order
// likely; the outcome must not depend on it).
TEST_P(RemoteConformanceTest, CancelledRecvIsWithdrawnAtTheProducer) {
  for (int64_t step = 2700; step < 2720; ++step) {
    const ParsedKey key = Key("cancelled");
    CancellationManager cancel;
    RendezvousArgs args;
    args.cancellation_manager = &cancel;
    RecvResult cancelled;
    consumer_->rendezvous_mgr().Find(step)->RecvAsync(key, args, cancelled.Capture());
    if (step % 2 == 1) absl::SleepFor(absl::Milliseconds(20));
    cancel.StartCancel();
    ASSERT_TRUE(cancelled.Wait());
    EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
    ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {8}, 6)}).ok());
    Tensor value;
    bool is_dead;
    ASSERT_TRUE(Recv(step, key, &value, &is_dead, absl::Seconds(10)).ok())
        << "the value sent after a cancelled Recv was lost (step " << step << ")";
    EXPECT_TRUE(VerifyPattern(value, 6).ok());
  }
}

TEST_P(RemoteConformanceTest, KilledProducerFailsPendingRecvWithUnavailable) {
  RecvResult result;
  consumer_->rendezvous_mgr().Find(26)->RecvAsync(Key("orphan"), {}, result.Capture());
  const absl::Time killed = absl::Now();
  producer_->Kill();
  ASSERT_TRUE(result.Wait());
  EXPECT_EQ(result.status.code(), absl::StatusCode::kUnavailable) << result.status;
  EXPECT_LT(absl::Now() - killed, kPeerTimeout + absl::Seconds(3));
  // The consumer keeps working.
  ASSERT_TRUE(consumer_->rendezvous_mgr().Find(26)->Send(
      *ParsedKey::Parse(CreateRendezvousKey(kConsumerCpu, 1, kConsumerCpu, "self")), {},
      testing::FloatTensor({1}), false).ok());
}

TEST_P(RemoteConformanceTest, HungProducerFailsPendingRecvWithinPeerTimeout) {
  RecvResult result;
  consumer_->rendezvous_mgr().Find(33)->RecvAsync(Key("stuck"), {}, result.Capture());
  ASSERT_TRUE(Produce(33, {}).ok());  // the producer is up and serving
  ASSERT_TRUE(producer_->Signal(SIGSTOP).ok());  // alive, connected, silent
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(result.Wait());
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_TRUE(producer_->Signal(SIGCONT).ok());
  producer_->Kill();
  EXPECT_EQ(result.status.code(), absl::StatusCode::kUnavailable) << result.status;
  EXPECT_LT(took, kPeerTimeout + absl::Seconds(3)) << "keepalive did not notice the hung peer";
}

TEST_P(RemoteConformanceTest, ProducerKilledMidTransferNeverCorrupts) {
  const ParsedKey key = Key("big");
  ASSERT_TRUE(Produce(27, {Item(key, DType::kUInt8, {Capped(int64_t{256} << 20)}, 9)}).ok());
  RecvResult result;
  consumer_->rendezvous_mgr().Find(27)->RecvAsync(key, {}, result.Capture());
  producer_->Kill();
  ASSERT_TRUE(result.Wait());
  if (result.status.ok()) {
    EXPECT_TRUE(VerifyPattern(result.value, 9).ok());
  } else {
    EXPECT_EQ(result.status.code(), absl::StatusCode::kUnavailable) << result.status;
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, RemoteConformanceTest,
                         ::testing::ValuesIn(ConformanceSettings()), SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteDataPlaneTest,
                         ::testing::ValuesIn(SettingsWhere(HasDataPlane)), SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteUcxTest, ::testing::ValuesIn(SettingsWhere(IsUcx)),
                         SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteFastPathTest,
                         ::testing::ValuesIn(SettingsWhere(HasFastPath)), SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteFastPathWithoutReadAheadTest,
                         ::testing::ValuesIn(SettingsWhere(HasFastPath)), SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteFastPathGpuTest,
                         ::testing::ValuesIn(SettingsWhere(HasFastPath)), SettingName);
INSTANTIATE_TEST_SUITE_P(Protocols, RemoteGpuTest, ::testing::ValuesIn(ConformanceSettings()),
                         SettingName);

}  // namespace
}  // namespace rdv::control::remote_test
