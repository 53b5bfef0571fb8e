// The conformance suite (tests/control/remote_conformance.h) on the
// RecvTensor protocol itself: held values and fetch_held, tagged sends,
// versions and the Handshake, forged releases, GPU routes, and a warm hot
// path.
#include "tests/control/remote_conformance.h"

namespace rdv::control::remote_test {
namespace {

// A single-message answer cannot carry a payload that needs a stream: the
// producer holds the value, and a fetch_held call streams it, once.
TEST_P(RemoteConformanceTest, SingleMessageRequestOfALargePayloadIsHeldAndFetchedOnce) {
  const int64_t bytes = (int64_t{4} << 20) + 1;  // one byte over a stream chunk
  RecvTensorRequest request;
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(38, "held_for_later", bytes, 7, &request));
  grpc::Status status;
  const std::vector<RecvTensorChunk> chunks = RawRecvTensor(request, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_FALSE(chunks[0].meta().payload_held());
  absl::StatusOr<Tensor> expected =
      MakePatternTensor(DType::kUInt8, *TensorShape::Create({bytes}), 7);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::string payload;
  for (const RecvTensorChunk& chunk : chunks) payload += chunk.data();
  EXPECT_EQ(payload, absl::string_view(static_cast<const char*>(expected->data()), bytes));

  RawRecvTensor(request, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
}

// A consumer that reads one message meets a producer that sends with tags
// (which needs the consumer to read the meta first): the value is held and
// fetched in a second call, never lost or hung.
TEST_P(RemoteUcxTest, TaggedProducerServesASingleMessageConsumer) {
  RestartProducerWithSetting("op", "tag");
  const ParsedKey key = Key("tagged");
  ASSERT_TRUE(Produce(40, {Item(key, DType::kUInt8, {int64_t{1} << 20}, 9)}).ok());
  Tensor value;
  bool is_dead;
  const absl::Status status = Recv(40, key, &value, &is_dead);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(VerifyPattern(value, 9).ok());
}

// A held value answers its own key only: a fetch_held call naming another
// key with the same step and request id gets nothing, and the value stays.
TEST_P(RemoteConformanceTest, FetchHeldOfAnotherKeyIsRefusedAndTheValueStays) {
  RecvTensorRequest request;
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(41, "held_for_its_key", int64_t{5} << 20, 10, &request));
  RecvTensorRequest other = request;
  other.set_rendezvous_key(std::string(Key("some_other_key").FullKey()));
  grpc::Status status;
  RawRecvTensor(other, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("some_other_key"), std::string::npos)
      << status.error_message();
  RawRecvTensor(request, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// A consumer that reads a tagged send's meta and goes away without posting
// its receive (its Recv was cancelled, its step aborted): the producer's
// call ends with it, so the producer still stops cleanly (before, its
// server waited for the send for good and the shutdown bound ended the
// process with status 1).
TEST_P(RemoteUcxTest, TaggedSendNobodyReceivesDoesNotHoldTheProducersShutdown) {
  RestartProducerWithSetting("op", "tag");
  // Wired up first: Debian's UCX 1.13 aborts the consumer when its peer
  // stops during the wireup of the producer's endpoint to it over tcp (see
  // ExpectLossMidTransferFailsTheRecv), which is not what this test is about.
  const ParsedKey warm = Key("received_first");
  ASSERT_TRUE(Produce(43, {Item(warm, DType::kUInt8, {int64_t{1} << 20}, 11)}).ok());
  ExpectPattern(43, warm, 11, size_t{1} << 20);
  const ParsedKey key = Key("never_received");
  ASSERT_TRUE(Produce(43, {Item(key, DType::kUInt8, {int64_t{1} << 20}, 12)}).ok());
  RecvTensorRequest request = RawRequest(43, key, 43001);
  request.set_protocol(GetParam().protocol);
  request.set_consumer_transport_address(consumer_->data_plane()->local_address());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
  auto reader = worker_stub_->RecvTensor(&context, request);
  RecvTensorChunk meta;
  ASSERT_TRUE(reader->Read(&meta));
  context.TryCancel();
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(meta.meta().has_transport());
  if (meta.meta().transport().op() != TRANSFER_OP_TAG) {
    GTEST_SKIP() << "this setting forces gets";
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  EXPECT_EQ(producer_->Stop(), 0);
  producer_.reset();
}

TEST_P(RemoteConformanceTest, StepCleanupDropsAHeldValue) {
  RecvTensorRequest request;
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(39, "held_then_cleaned", int64_t{5} << 20, 8, &request));
  CleanupStepRequest cleanup;
  cleanup.set_step_id(39);
  CleanupStepResponse cleaned;
  WorkerCall([&](grpc::ClientContext* context) {
    return worker_stub_->CleanupStep(context, cleanup, &cleaned);
  });
  grpc::Status status;
  RawRecvTensor(request, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("cleaned up"), std::string::npos) << status.error_message();
}

// A timed-out Recv withdraws its request, which may not have reached the
// producer yet: arriving after its withdrawal, it is refused, and the value
// stays for the next Recv (else it would go to a Recv that is gone).
TEST_P(RemoteConformanceTest, RecvTensorArrivingAfterItsWithdrawalIsRefused) {
  const ParsedKey key = Key("withdrawn_early");
  WithdrawRecvTensorRequest withdraw;
  withdraw.set_step_id(38);
  withdraw.set_request_id(38001);
  WithdrawRecvTensorResponse withdrawn;
  WorkerCall([&](grpc::ClientContext* context) {
    return worker_stub_->WithdrawRecvTensor(context, withdraw, &withdrawn);
  });
  EXPECT_TRUE(withdrawn.withdrawn());
  ASSERT_TRUE(Produce(38, {Item(key, DType::kFloat, {4}, 6)}).ok());
  grpc::Status status;
  RawRecvTensor(RawRequest(38, key, 38001), &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  ExpectPattern(38, key, 6, 16);
}

// A consumer need not Handshake before its first Recv: the request itself
// carries its version, and another version is refused, naming both.
TEST_P(RemoteConformanceTest, RecvTensorOfAnotherProtocolVersionIsRefused) {
  const ParsedKey key = Key("versioned");
  ASSERT_TRUE(Produce(42, {Item(key, DType::kUInt8, {16}, 11)}).ok());
  RecvTensorRequest request = RawRequest(42, key, 42001);
  request.set_protocol_version(kProtocolVersion + 1);
  grpc::Status status;
  RawRecvTensor(request, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find(absl::StrCat("version ", kProtocolVersion + 1)),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find(absl::StrCat("speaks ", kProtocolVersion)),
            std::string::npos)
      << status.error_message();
  request.clear_protocol_version();  // what a worker of version 2 sends
  request.set_request_id(42002);
  RawRecvTensor(request, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("2 or older"), std::string::npos)
      << status.error_message();
}

TEST_P(RemoteConformanceTest, HandshakeChecksTheProtocolVersion) {
  HandshakeRequest request;
  request.set_worker_name(consumer_->worker_name());
  request.set_incarnation(consumer_->incarnation());
  request.set_protocol_version(kProtocolVersion);
  HandshakeResponse response;
  WorkerCall([&](grpc::ClientContext* context) {
    return worker_stub_->Handshake(context, request, &response);
  });
  EXPECT_EQ(response.worker_name(), "/job:worker/replica:0/task:0");
  EXPECT_EQ(response.incarnation(), producer_->incarnation());
  request.set_protocol_version(kProtocolVersion + 1);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
  const grpc::Status refused = worker_stub_->Handshake(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("protocol version"), std::string::npos);
}

// The producer tells in its Handshake how its payloads leave it; the
// consumer learns that from its first Recv on, without waiting for it.
TEST_P(RemoteConformanceTest, ConsumerLearnsTheProducersTransferOpFromItsHandshake) {
  HandshakeRequest request;
  request.set_worker_name(consumer_->worker_name());
  request.set_protocol_version(kProtocolVersion);
  HandshakeResponse response;
  WorkerCall([&](grpc::ClientContext* context) {
    return worker_stub_->Handshake(context, request, &response);
  });
  const ParsedKey key = Key("learned");
  ASSERT_TRUE(Produce(43, {Item(key, DType::kUInt8, {16}, 5)}).ok());
  ASSERT_TRUE(RecvStatus(43, key).ok());
  absl::StatusOr<std::shared_ptr<WorkerClient>> producer =
      consumer_->worker_cache().Get("/job:worker/replica:0/task:0");
  ASSERT_TRUE(producer.ok()) << producer.status();
  DataPlane* plane = consumer_->data_plane();
  if (plane == nullptr) {
    EXPECT_EQ(response.transports_size(), 0);
    EXPECT_EQ((*producer)->transfer_op.load(), TRANSFER_OP_UNSPECIFIED);
    return;
  }
  ASSERT_EQ(response.transports_size(), 1);
  EXPECT_EQ(response.transports(0).name(), plane->transport().name());
  EXPECT_NE(response.transports(0).transfer_op(), TRANSFER_OP_UNSPECIFIED);
  EXPECT_TRUE(rdv::testing::PollUntil([&] {
    return (*producer)->transfer_op.load() == response.transports(0).transfer_op();
  })) << "the consumer did not learn op " << response.transports(0).transfer_op();
}

TEST_P(RemoteConformanceTest, ForgedReleaseIsRefusedByTheProducer) {
  const ParsedKey key = Key("held");
  ASSERT_TRUE(Produce(34, {Item(key, DType::kUInt8, {int64_t{1} << 20}, 3)}).ok());
  const grpc::Status status = ReleaseForged(34, 987654321, 1 << 20, /*cuda_ipc=*/false);
  EXPECT_EQ(status.error_code(), std::string(GetParam().protocol) == "grpc"
                                     ? grpc::StatusCode::FAILED_PRECONDITION
                                     : grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  Tensor value;  // the real transfer is untouched
  bool is_dead;
  ASSERT_TRUE(Recv(34, key, &value, &is_dead).ok());
  EXPECT_TRUE(VerifyPattern(value, 3).ok());
}

TEST_P(RemoteConformanceTest, ForgedCudaIpcReleaseIsRefusedByTheProducer) {
  const grpc::Status status = ReleaseForged(36, 42, 4096, /*cuda_ipc=*/true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("CUDA IPC transfer 42"), std::string::npos)
      << status.error_message();
}

// Same host, both sides on a GPU: CUDA IPC (on by default), from the
// producer's first answer on, whichever of its threads gives it.
TEST_P(RemoteGpuTest, GpuToGpuArrivesByteExact) {
  const GetStatsResponse before = StatsOf(producer_->address());
  ExpectTensorsCross(kProducerGpu, kConsumerGpu, 37);
  const GetStatsResponse after = StatsOf(producer_->address());
  for (const char* path : {"staged", "stream"}) {
    EXPECT_EQ(CounterOf(after, "rdv_sent_transfers_total", "path", path),
              CounterOf(before, "rdv_sent_transfers_total", "path", path))
        << "a GPU tensor went by " << path;
  }
  EXPECT_EQ(CounterOf(after, "rdv_sent_transfers_total", "path", "cuda_ipc") -
                CounterOf(before, "rdv_sent_transfers_total", "path", "cuda_ipc"),
            3)
      << "each of the three tensors goes by CUDA IPC";
}

// The producer refuses CUDA IPC: the protocol carries the bytes, staged
// through host memory on both sides.
TEST_P(RemoteGpuTest, GpuToGpuWithoutCudaIpcIsStaged) {
  RestartProducerWith("RDV_CUDA_IPC", "0");
  ExpectTensorsCross(kProducerGpu, kConsumerGpu, 38);
}

TEST_P(RemoteGpuTest, GpuToHostAndHostToGpuArriveByteExact) {
  ExpectTensorsCross(kProducerGpu, kConsumerCpu, 39);
  ExpectTensorsCross(kProducerCpu, kConsumerGpu, 40);
}

TEST_P(RemoteDataPlaneTest, WarmHotPathRegistersNothing) {
  DataPlane* plane = consumer_->data_plane();
  const int64_t sizes[] = {8 << 10, 64 << 10, 1 << 20};
  uint64_t registrations_when_warm = 0;
  // A warm-up round, then three that must find all their memory ready.
  for (int round = 0; round < 4; ++round) {
    std::vector<ProduceItem> items;
    std::vector<ParsedKey> keys;
    for (int i = 0; i < 100; ++i) {
      keys.push_back(Key(absl::StrCat("hot", round, "_", i)));
      items.push_back(Item(keys.back(), DType::kUInt8, {sizes[i % 3]}, 1));
    }
    ASSERT_TRUE(Produce(35, items).ok());
    for (const ParsedKey& key : keys) {
      Tensor value;
      bool is_dead;
      ASSERT_TRUE(Recv(35, key, &value, &is_dead).ok());
      ASSERT_TRUE(VerifyPattern(value, 1).ok());
    }
    if (round == 0) registrations_when_warm = plane->allocator()->stats().registrations;
  }
  EXPECT_EQ(plane->allocator()->stats().registrations, registrations_when_warm)
      << "300 transfers of recurring sizes registered memory after warm-up";
  EXPECT_GE(plane->allocator()->stats().reused, 300u);
}

}  // namespace
}  // namespace rdv::control::remote_test
