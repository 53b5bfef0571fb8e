// A real consumer worker receiving from a fake producer: a gRPC server on
// loopback that answers every RecvTensor with forged bytes. Each malformed
// answer fails its Recv (blocking and async) with a clear status, nothing
// crashes (this suite runs under ASan), and the consumer goes on serving.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "control/data_plane.h"
#include "control/protocol.h"
#include "control/worker_server.h"
#include "gtest/gtest.h"
#include "tests/control/forged_chunk.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

using rdv::testing::kWaitLimit;

constexpr char kProducerCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kConsumerCpu[] = "/job:worker/replica:0/task:1/device:CPU:0";

// Answers every call with one message, the answer it is given, then OK.
class FakeProducer final : public grpc::CallbackGenericService {
 public:
  void SetAnswer(grpc::ByteBuffer answer) {
    std::lock_guard lock(mu_);
    answer_ = std::move(answer);
  }
  grpc::ByteBuffer answer() {
    std::lock_guard lock(mu_);
    return answer_;
  }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Reactor(answer());
  }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(grpc::ByteBuffer answer) : answer_(std::move(answer)) {
      StartRead(&request_);
    }
    void OnReadDone(bool) override { StartWriteAndFinish(&answer_, {}, grpc::Status::OK); }
    void OnDone() override { delete this; }

   private:
    grpc::ByteBuffer request_;
    grpc::ByteBuffer answer_;
  };

  std::mutex mu_;
  grpc::ByteBuffer answer_;  // guarded by mu_
};

class HostileProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterCallbackGenericService(&producer_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    port_ = port;
    StartConsumer("grpc");
  }

  void StartConsumer(const char* protocol, absl::Duration peer_timeout = absl::Seconds(5),
                     plugin::TransportSettings transport_settings = {}) {
    consumer_.reset();
    WorkerServerOptions options;
    options.task = 1;
    options.protocol = protocol;
    options.data_plane.transport_settings = std::move(transport_settings);
    options.cluster = *ClusterSpec::FromFlag(
        absl::StrCat("worker=127.0.0.1:", port_, ",127.0.0.1:0"));
    options.control.max_tensor_bytes = uint64_t{4} << 30;
    options.control.peer_timeout = peer_timeout;
    absl::StatusOr<std::unique_ptr<WorkerServer>> consumer = WorkerServer::Start(options);
    ASSERT_TRUE(consumer.ok()) << consumer.status();
    consumer_ = *std::move(consumer);
  }

  void TearDown() override {
    consumer_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  // Answers with `chunk` and receives, blocking and then async, in a step
  // of its own: both statuses must have `code`, and their messages contain
  // each of `names` ("$KEY" stands for the key's tensor name).
  void ExpectRecvFails(grpc::ByteBuffer chunk, absl::StatusCode code, const char* what,
                       std::vector<std::string> names = {}) {
    producer_.SetAnswer(std::move(chunk));
    const int64_t step = ++steps_;
    const ParsedKey key = *ParsedKey::Parse(
        CreateRendezvousKey(kProducerCpu, 1, kConsumerCpu, absl::StrCat("edge_", step)));
    std::shared_ptr<Rendezvous> rendezvous = consumer_->rendezvous_mgr().Find(step);
    Tensor value;
    bool is_dead = false;
    const absl::Status blocking = rendezvous->Recv(key, {}, &value, &is_dead, kWaitLimit);
    EXPECT_EQ(blocking.code(), code) << what << ", blocking Recv: " << blocking;
    rdv::testing::RecvResult async;
    rendezvous->RecvAsync(key, {}, async.Capture());
    ASSERT_TRUE(async.Wait()) << what;
    EXPECT_EQ(async.status.code(), code) << what << ", RecvAsync: " << async.status;
    for (std::string name : names) {
      if (name == "$KEY") name = std::string(key.tensor_name());
      EXPECT_TRUE(absl::StrContains(blocking.message(), name)) << name << " in " << blocking;
      EXPECT_TRUE(absl::StrContains(async.status.message(), name)) << name << " in " << async.status;
    }
    consumer_->rendezvous_mgr().Cleanup(step);
  }

  FakeProducer producer_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerServer> consumer_;
  int64_t steps_ = 0;
};

TEST_F(HostileProducerTest, MalformedAnswersFailTheRecvAndTheConsumerServesOn) {
  TensorMeta dead = ForgedMeta(DType::kUInt8, {10}, 10);
  dead.set_is_dead(true);
  ExpectRecvFails(ForgedChunk(&dead, 10, std::string(10, 'x')), absl::StatusCode::kDataLoss,
                  "a dead tensor with payload bytes");

  const uint64_t two_gib = (uint64_t{1} << 31) + 16;
  const TensorMeta large = ForgedMeta(DType::kUInt8, {static_cast<int64_t>(two_gib)}, two_gib);
  ExpectRecvFails(ForgedChunk(&large, uint64_t{1} << 31, std::string(100, 'x')),
                  absl::StatusCode::kDataLoss, "a data field of 2^31 bytes carrying 100");

  const TensorMeta strings = ForgedMeta(DType::kString, {1}, uint64_t{1} << 40);
  ExpectRecvFails(ForgedChunk(&strings, 0, ""), absl::StatusCode::kResourceExhausted,
                  "a string tensor of 2^40 payload bytes");

  const TensorMeta huge = ForgedMeta(DType::kFloat, {int64_t{1} << 31}, uint64_t{1} << 33);
  ExpectRecvFails(ForgedChunk(&huge, 0, ""), absl::StatusCode::kResourceExhausted,
                  "a tensor above RDV_MAX_TENSOR_BYTES");

  grpc::Slice garbage(std::string("\x0a\xff\xff\xff\xff\x0f garbage", 14));
  ExpectRecvFails(grpc::ByteBuffer(&garbage, 1), absl::StatusCode::kDataLoss, "garbage");

  // Still serving: a well-formed answer arrives byte-exact.
  const TensorMeta good = ForgedMeta(DType::kUInt8, {4}, 4);
  producer_.SetAnswer(ForgedChunk(&good, 4, "abcd"));
  const ParsedKey key =
      *ParsedKey::Parse(CreateRendezvousKey(kProducerCpu, 1, kConsumerCpu, "edge_good"));
  Tensor value;
  bool is_dead = true;
  const absl::Status status =
      consumer_->rendezvous_mgr().Find(100)->Recv(key, {}, &value, &is_dead, kWaitLimit);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FALSE(is_dead);
  EXPECT_EQ(std::string(static_cast<const char*>(value.data()), value.TotalBytes()), "abcd");
}

// A producer whose descriptor names a transport address that is not one:
// refused before UCX parses it (UCX aborts the process on a garbage one).
TEST_F(HostileProducerTest, GarbageProducerAddressFailsTheRecv) {
  StartConsumer("grpc+ucx");
  if (consumer_ == nullptr) return;
  TensorMeta meta = ForgedMeta(DType::kUInt8, {65536}, 0);
  TransportDescriptor* transport = meta.mutable_transport();
  transport->set_op(TRANSFER_OP_GET);
  transport->set_transfer_id(1);
  transport->set_length(65536);
  transport->set_address(0x10000);
  transport->set_remote_key("key");
  transport->set_producer_transport_address(std::string("\x01\x02 not an address"));
  // The error names the key, the size and the producer, not only the cause.
  ExpectRecvFails(ForgedChunk(&meta, 0, ""), absl::StatusCode::kInvalidArgument,
                  "a descriptor naming a garbage transport address",
                  {"$KEY", "65536 bytes", "worker /job:worker/replica:0/task:0"});
}

// A producer that describes a tagged send, says the send is done, and never
// sends: the consumer's posted receive is bounded by the peer timeout.
TEST_F(HostileProducerTest, TaggedSendThatNeverComesFailsTheRecvWithinThePeerTimeout) {
  StartConsumer("grpc+ucx", absl::Seconds(1), {{"op", "tag"}});
  if (consumer_ == nullptr) return;
  TensorMeta meta = ForgedMeta(DType::kUInt8, {65536}, 0);
  TransportDescriptor* transport = meta.mutable_transport();
  transport->set_op(TRANSFER_OP_TAG);
  transport->set_transfer_id(12345);
  transport->set_length(65536);
  transport->set_producer_transport_address(consumer_->data_plane()->local_address());
  const absl::Time start = absl::Now();
  ExpectRecvFails(ForgedChunk(&meta, 0, ""), absl::StatusCode::kDataLoss,
                  "a tagged send said done that never comes",
                  {"$KEY", "65536 bytes", "did not arrive"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(2 * (1 + 3)));
  DataPlane* plane = consumer_->data_plane();
  EXPECT_TRUE(rdv::testing::PollUntil([&] { return plane->fetches_in_flight() == 0; }))
      << "the abandoned receives were not cancelled";
}

}  // namespace
}  // namespace rdv::control
