// The conformance suite (tests/control/remote_conformance.h) where things
// go wrong: peers lost, hung, restarted or unreachable; transfers cut
// short; what a producer exposes and holds for a consumer that goes.
#include "tests/control/remote_conformance.h"

namespace rdv::control::remote_test {
namespace {

// The data plane cannot always notice a dead peer by itself: over shared
// memory a get needs the producer's own progress, and waits for it forever.
// A producer stopped, then killed, with a transfer from it in flight leaves
// the control plane's watch to end the Recv, within the peer timeout and
// with UNAVAILABLE; the transport then lets go of the abandoned fetch.
TEST_P(RemoteDataPlaneTest, ProducerLostMidTransferFailsTheRecvWithinThePeerTimeout) {
  ExpectLossMidTransferFailsTheRecv(/*blocking=*/false);
}

TEST_P(RemoteDataPlaneTest, ProducerLostMidTransferFailsTheBlockingRecvWithinThePeerTimeout) {
  ExpectLossMidTransferFailsTheRecv(/*blocking=*/true);
}

// Where the NIC cannot bound a get to its buffer (UCX would serve it in
// software at any address), a producer's descriptor exposes no address or
// key: the producer sends the bytes, the consumer says where they land.
// The one exception is a value in a mapped segment between processes of
// one host: its key names that segment, which the consumer attaches
// read-only and copies itself (a wrong key fails in the consumer).
TEST_P(RemoteDataPlaneTest, DescriptorsExposeMemoryOnlyWhereTheNicBoundsTheRead) {
  DataPlane* plane = consumer_->data_plane();
  const ParsedKey key = Key("scoped");
  const int64_t bytes = int64_t{1} << 20;
  ASSERT_TRUE(Produce(50, {Item(key, DType::kUInt8, {bytes}, 6)}).ok());
  RecvTensorRequest request = RawRequest(50, key, 50001);
  request.set_protocol(GetParam().protocol);
  request.set_consumer_transport_address(plane->local_address());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
  auto reader = worker_stub_->RecvTensor(&context, request);
  RecvTensorChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(chunk.meta().has_transport()) << chunk.meta().DebugString();
  const TransportDescriptor& descriptor = chunk.meta().transport();
  if (LendsMappedValues(GetParam())) {
    EXPECT_EQ(descriptor.op(), TRANSFER_OP_GET) << "1 MiB lies in a mapped segment";
  } else if (descriptor.op() == TRANSFER_OP_GET) {
    EXPECT_TRUE(GetParam().needs_rdma || GetParam().ucx_op != nullptr)
        << "a get descriptor where UCX serves gets in software";
  } else {
    EXPECT_EQ(descriptor.op(), TRANSFER_OP_TAG);
    EXPECT_EQ(descriptor.address(), 0u);
    EXPECT_TRUE(descriptor.remote_key().empty());
  }
  // Received, so that nothing stays in flight, and byte-exact. On a thread
  // of its own, as a worker's Recv would: UCX's thread-local state on the
  // main thread crashes LeakSanitizer's scan at exit (a stale dynamic TLS
  // block), which is not what this test is about.
  absl::StatusOr<Tensor> destination;
  Notification fetched;
  absl::Status status;
  std::thread([&] {
    destination = Tensor::Allocate(plane->ReceiveAllocator(MemoryLocation::Host()),
                                   DType::kUInt8, *TensorShape::Create({bytes}));
    if (!destination.ok()) {
      status = destination.status();
      fetched.Notify();
      return;
    }
    plane->Fetch(descriptor, *destination, [&](absl::Status s) {
      status = s;
      fetched.Notify();
    });
  }).join();
  ASSERT_TRUE(fetched.WaitForNotificationWithTimeout(kWaitLimit));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(VerifyPattern(*destination, 6).ok());
  while (reader->Read(&chunk)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
}

// A consumer's transport address that is not one is refused before the
// transport parses it, and the producer serves on.
TEST_P(RemoteDataPlaneTest, GarbageConsumerAddressIsRefusedAndTheProducerServesOn) {
  const ParsedKey key = Key("misaddressed");
  ASSERT_TRUE(Produce(52, {Item(key, DType::kUInt8, {int64_t{1} << 20}, 8)}).ok());
  RecvTensorRequest request = RawRequest(52, key, 52001);
  request.set_protocol(GetParam().protocol);
  request.set_consumer_transport_address(std::string("\x01\x02 not an address"));
  grpc::Status status;
  RawRecvTensor(request, &status);
  // A producer that sends (tag) needs the address; one that lends its
  // buffer (get) does not read it.
  EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_code() << ": " << status.error_message();
  const ParsedKey next = Key("after");
  ASSERT_TRUE(Produce(52, {Item(next, DType::kUInt8, {int64_t{1} << 20}, 9)}).ok());
  Tensor value;
  bool is_dead;
  ASSERT_TRUE(Recv(52, next, &value, &is_dead).ok());
  EXPECT_TRUE(VerifyPattern(value, 9).ok());
}

// A consumer lost while the producer holds things for it (a value for its
// fetch_held call, a buffer for it to read, a tagged send to it, which
// shared memory never fails by itself): the producer lets go of them within
// the peer timeout, not at a step cleanup that may never come.
TEST_P(RemoteConformanceTest, ConsumerLostFreesWhatTheProducerHeldForIt) {
  const int64_t bytes = Capped(int64_t{5} << 20);
  const ParsedKey one_message = Key("held_one");
  const ParsedKey streamed = Key("held_two");
  ASSERT_TRUE(Produce(60, {Item(one_message, DType::kUInt8, {bytes}, 1),
                           Item(streamed, DType::kUInt8, {bytes}, 2)})
                  .ok());
  DataPlane* plane = consumer_->data_plane();
  RecvTensorRequest request = RawRequest(60, one_message, 60001);
  request.set_protocol(GetParam().protocol);
  if (plane != nullptr) request.set_consumer_transport_address(plane->local_address());
  request.set_single_message(true);
  grpc::Status status;
  RawRecvTensor(request, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  uint64_t expected = 1;
  if (plane != nullptr) {
    // Read by nobody: the transfer is held (get), or the send waits for a
    // receive that never comes (tag) after the consumer gave up.
    request.set_rendezvous_key(std::string(streamed.FullKey()));
    request.set_request_id(60002);
    request.set_single_message(false);
    RawRecvTensor(request, &status, absl::Seconds(1));
    expected = 2;
  }
  ASSERT_TRUE(rdv::testing::PollUntil([&] {
    const HoldingsResponse holdings = Holdings();
    return HeldInAll(holdings) == expected && holdings.watched_workers_reached() == 1;
  })) << Holdings().DebugString();

  consumer_->Shutdown();
  const absl::Time lost = absl::Now();
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return HeldInAll(Holdings()) == 0; }))
      << "still held for a lost consumer: " << Holdings().DebugString();
  EXPECT_LT(absl::Now() - lost, kPeerTimeout + absl::Seconds(3));
  ASSERT_TRUE(Produce(61, {Item(Key("after_loss"), DType::kUInt8, {16}, 3)}).ok());
}

TEST_P(RemoteConformanceTest, RestartedProducerGivesAborted) {
  const uint64_t old_incarnation = producer_->incarnation();
  producer_->Kill();
  StartProducer();
  ASSERT_NE(producer_->incarnation(), old_incarnation);
  const absl::Status status = RecvStatus(28, Key("x", old_incarnation));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_NE(status.message().find("restarted"), absl::string_view::npos) << status;
}

TEST_P(RemoteConformanceTest, KeyFromAnotherWorkerIsInvalidArgument) {
  // Task 2 is pointed at the producer, which is task 0.
  consumer_->worker_cache().SetAddress("worker", 2, producer_->address());
  const absl::Status status =
      RecvStatus(29, Key("wrong", 0, "/job:worker/replica:0/task:2/device:CPU:0"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_P(RemoteConformanceTest, UnknownWorkerIsInvalidArgument) {
  const absl::Status status =
      RecvStatus(30, Key("nowhere", 0, "/job:ps/replica:0/task:0/device:CPU:0"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_P(RemoteConformanceTest, UnreachableWorkerIsUnavailable) {
  consumer_->worker_cache().SetAddress("worker", 3, "127.0.0.1:1");
  const absl::Time start = absl::Now();
  const absl::Status status =
      RecvStatus(31, Key("gone", 0, "/job:worker/replica:0/task:3/device:CPU:0"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(absl::Now() - start, kPeerTimeout + absl::Seconds(3));
}

TEST_P(RemoteConformanceTest, RepeatedRequestIdIsRefused) {
  const ParsedKey key = Key("once");
  ASSERT_TRUE(Produce(32, {Item(key, DType::kUInt8, {4}, 1), Item(key, DType::kUInt8, {4}, 2)}).ok());
  const RecvTensorRequest request = RawRequest(32, key, 424242);
  std::vector<grpc::Status> statuses(2);
  for (grpc::Status& status : statuses) RawRecvTensor(request, &status);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0].error_message();
  EXPECT_EQ(statuses[1].error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

}  // namespace
}  // namespace rdv::control::remote_test
