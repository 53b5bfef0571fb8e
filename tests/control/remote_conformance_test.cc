// The cross-process conformance suite: this test process runs the consumer
// worker (task 1, an embedded WorkerServer) and spawns the producer worker
// (task 0, a real rdv-worker with its driver on) on 127.0.0.1. Every
// protocol instantiates it; every wait is bounded.
//
// Across hosts or containers: with RDV_TEST_LAUNCHER=host:port an
// rdv-launcher there runs the producer, listening on that host, and the
// consumer listens on RDV_TEST_LISTEN_HOST (an address of this host the
// other one reaches).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "control/protocol.h"
#include "control/tensor_codec.h"
#include "control/tensor_pattern.h"
#include "core/cuda.h"
#include "core/device_copy.h"
#include "control/worker_server.h"
#include "gtest/gtest.h"
#include "control/worker_process.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

using testing::kWaitLimit;
using testing::RecvResult;

constexpr char kProducerCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kConsumerCpu[] = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr char kProducerGpu[] = "/job:worker/replica:0/task:0/device:GPU:0";
constexpr char kConsumerGpu[] = "/job:worker/replica:0/task:1/device:GPU:0";
// The consumer's peer timeout: RDV_TEST_PEER_TIMEOUT_MS, else 2 s. The
// Docker forms, under emulation, give a TLS handshake more.
absl::Duration TestPeerTimeout() {
  const char* text = std::getenv("RDV_TEST_PEER_TIMEOUT_MS");
  return absl::Milliseconds(text == nullptr ? 2000 : std::strtoll(text, nullptr, 10));
}
const absl::Duration kPeerTimeout = TestPeerTimeout();

// A protocol and the environment both workers run it under.
struct ProtocolSetting {
  const char* name;      // test name suffix
  const char* protocol;  // --protocol
  const char* ucx_tls;   // UCX_TLS, or null
  bool needs_rdma = false;  // runs on an RDMA device (tests/softroce runs it)
  const char* ucx_op = nullptr;  // RDV_UCX_OP, or null
};

// ctest lists each case under the setting's name.
void PrintTo(const ProtocolSetting& setting, std::ostream* out) { *out << setting.name; }

// The largest tensor a test moves: RDV_TEST_MAX_BYTES, where the wire is
// slow (SoftRoCE under emulation moves tens of MB/s).
int64_t Capped(int64_t bytes) {
  const char* text = std::getenv("RDV_TEST_MAX_BYTES");
  return text == nullptr ? bytes : std::min<int64_t>(bytes, std::strtoll(text, nullptr, 10));
}

bool HaveRdmaDevice() {
  std::error_code error;
  return !std::filesystem::is_empty("/sys/class/infiniband", error) && !error;
}

// Sets variables for the lifetime of the object, then puts them back.
class ScopedEnv {
 public:
  void Set(const char* name, const std::string& value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      it->second ? setenv(it->first.c_str(), it->second->c_str(), 1)
                 : unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class RemoteConformanceTest : public ::testing::TestWithParam<ProtocolSetting> {
 protected:
  void SetUp() override {
    if (GetParam().needs_rdma && !HaveRdmaDevice()) {
      if (std::getenv("RDV_TEST_REQUIRE_RDMA") != nullptr) FAIL() << "no RDMA device";
      GTEST_SKIP() << "no RDMA device on this machine (tests/softroce runs these)";
    }
    // The consumer (this process) and the producer (its child) both read it.
    if (GetParam().ucx_tls != nullptr) {
      setenv("UCX_TLS", GetParam().ucx_tls, 1);
    } else {
      unsetenv("UCX_TLS");
    }
    if (GetParam().ucx_op != nullptr) scoped_env_.Set("RDV_UCX_OP", GetParam().ucx_op);
    if (GetParam().needs_rdma && GetParam().ucx_tls != nullptr) {
      scoped_env_.Set("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
      if (const char* device = std::getenv("RDV_IB_DEVICE")) {
        scoped_env_.Set("UCX_NET_DEVICES", absl::StrCat(device, ":1"));
      }
    }
    WorkerServerOptions options;
    options.task = 1;
    options.listen_address = absl::StrCat(EnvOr("RDV_TEST_LISTEN_HOST", "127.0.0.1"), ":0");
    options.protocol = GetParam().protocol;
    options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1,127.0.0.1:1");
    options.control.peer_timeout = kPeerTimeout;
    // The door the environment sets up (tests/control/CMakeLists.txt runs
    // the suite once more with TLS and a token), for the producer too.
    absl::StatusOr<SecurityOptions> security = SecurityOptions::FromEnvironment();
    ASSERT_TRUE(security.ok()) << security.status();
    options.control.security = *std::move(security);
    security_ = options.control.security;
    auto consumer = WorkerServer::Start(options);
    ASSERT_TRUE(consumer.ok()) << consumer.status();
    consumer_ = *std::move(consumer);
    consumer_->worker_cache().SetAddress("worker", 1, consumer_->address());
    StartProducer();
  }

  void TearDown() override {
    // A clean exit: graceful shutdown works and (under ASan) nothing leaked.
    if (producer_ != nullptr) {
      EXPECT_EQ(producer_->Stop(), 0);
    }
  }

  void StartProducer() {
    const char* launcher = std::getenv("RDV_TEST_LAUNCHER");
    const std::vector<std::string> args = {
        "--task=0", "--enable_driver", absl::StrCat("--protocol=", GetParam().protocol),
        absl::StrCat("--listen=", launcher ? HostOf(launcher) : "127.0.0.1", ":0"),
        absl::StrCat("--cluster=worker=127.0.0.1:1,", consumer_->address())};
    auto producer = launcher ? WorkerProcess::Launch(launcher, args, kWaitLimit, ProducerEnv())
                             : WorkerProcess::Start(args, kWaitLimit, ProducerEnv());
    ASSERT_TRUE(producer.ok()) << producer.status();
    producer_ = *std::move(producer);
    consumer_->worker_cache().SetAddress("worker", 0, producer_->address());
    driver_ = DriverService::NewStub(
        CreateMemberChannel(producer_->address(), security_, grpc::ChannelArguments()));
    // rdv's own settings: messages of a whole stream chunk, for one.
    ControlOptions control;
    control.security = security_;
    worker_stub_ = WorkerService::NewStub(
        CreateMemberChannel(producer_->address(), security_, PeerChannelArguments(control)));
  }

  // What the producer runs under beside its own host's environment: this
  // setting's UCX_TLS and, with RDV_TEST_PEER_IB_DEVICE, another device, so
  // that the bytes cross the wire between the two.
  EnvChanges ProducerEnv() const {
    EnvChanges env = extra_producer_env_;
    const ProtocolSetting& setting = GetParam();
    env.emplace_back("UCX_TLS", setting.ucx_tls ? std::optional<std::string>(setting.ucx_tls)
                                                : std::nullopt);
    if (setting.ucx_op != nullptr) env.emplace_back("RDV_UCX_OP", setting.ucx_op);
    if (!setting.needs_rdma) return env;
    if (setting.ucx_tls != nullptr) env.emplace_back("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
    if (const char* peer = std::getenv("RDV_TEST_PEER_IB_DEVICE")) {
      env.emplace_back("RDV_IB_DEVICE", peer);
      env.emplace_back("UCX_NET_DEVICES", absl::StrCat(peer, ":1"));
    }
    return env;
  }

  static std::string EnvOr(const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : fallback;
  }

  static std::string HostOf(const std::string& address) {
    return address.substr(0, address.rfind(':'));
  }

  ParsedKey Key(const std::string& name, uint64_t incarnation = 0,
                const char* src = kProducerCpu, const char* dst = kConsumerCpu) {
    return *ParsedKey::Parse(CreateRendezvousKey(
        src, incarnation ? incarnation : producer_->incarnation(), dst, name));
  }

  // Moves uint8 tensors of `sizes` from `src` to `dst` (GPU or CPU devices)
  // and checks where they land and every byte.
  void ExpectTensorsCross(const char* src, const char* dst, int64_t step) {
    for (const int64_t bytes : {int64_t{1}, int64_t{4} << 10, Capped(int64_t{64} << 20)}) {
      const ParsedKey key = Key(absl::StrCat("across", bytes), 0, src, dst);
      ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, 21)}).ok());
      Tensor value;
      bool is_dead;
      const absl::Status status = Recv(step, key, &value, &is_dead);
      ASSERT_TRUE(status.ok()) << bytes << ": " << status;
      const MemoryLocation expected =
          key.dst().IsGpu() ? MemoryLocation::Cuda(0) : MemoryLocation::Host();
      EXPECT_EQ(value.location().is_host(), expected.is_host()) << value.location().ToString();
      absl::StatusOr<Tensor> on_host =
          value.location().is_host() ? value : CopyTensor(value, MemoryLocation::Host());
      ASSERT_TRUE(on_host.ok()) << on_host.status();
      EXPECT_TRUE(VerifyPattern(*on_host, 21).ok()) << bytes;
    }
  }

  // Releases a transfer the producer never described.
  grpc::Status ReleaseForged(int64_t step, uint64_t transfer_id, uint64_t length, bool cuda_ipc) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    ReleaseTransfersRequest request;
    ReleasedTransfer* forged = request.add_transfers();
    forged->set_step_id(step);
    forged->set_transfer_id(transfer_id);
    forged->set_length(length);
    forged->set_cuda_ipc(cuda_ipc);
    ReleaseTransfersResponse response;
    return worker_stub_->ReleaseTransfers(&context, request, &response);
  }

  void RestartProducerWith(const char* name, const char* value) {
    ASSERT_EQ(producer_->Stop(), 0);
    producer_.reset();
    extra_producer_env_.emplace_back(name, value);
    StartProducer();
  }

  static ProduceItem Item(const ParsedKey& key, DType dtype, std::vector<int64_t> dims,
                          uint32_t seed) {
    ProduceItem item;
    item.set_rendezvous_key(std::string(key.FullKey()));
    item.set_dtype(static_cast<int>(dtype));
    for (int64_t d : dims) item.add_dims(d);
    item.set_seed(seed);
    return item;
  }

  absl::Status Produce(int64_t step, std::vector<ProduceItem> items) {
    ProduceRequest request;
    request.set_step_id(step);
    for (auto& item : items) *request.add_items() = std::move(item);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    ProduceResponse response;
    const grpc::Status status = driver_->Produce(&context, request, &response);
    return status.ok() ? absl::OkStatus()
                       : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                      status.error_message());
  }

  absl::Status Recv(int64_t step, const ParsedKey& key, Tensor* value, bool* is_dead,
                    absl::Duration timeout = kWaitLimit) {
    return consumer_->rendezvous_mgr().Find(step)->Recv(key, {}, value, is_dead, timeout);
  }

  // A Recv whose value does not matter, only how it ended.
  absl::Status RecvStatus(int64_t step, const ParsedKey& key) {
    Tensor value;
    bool is_dead;
    return Recv(step, key, &value, &is_dead);
  }

  // A RecvTensor call made by hand: its chunks, and its status in `status`.
  std::vector<RecvTensorChunk> RawRecvTensor(const RecvTensorRequest& request,
                                             grpc::Status* status,
                                             absl::Duration limit = kWaitLimit) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + limit));
    auto reader = worker_stub_->RecvTensor(&context, request);
    std::vector<RecvTensorChunk> chunks(1);
    while (reader->Read(&chunks.back())) chunks.emplace_back();
    chunks.pop_back();
    *status = reader->Finish();
    return chunks;
  }

  RecvTensorRequest RawRequest(int64_t step, const ParsedKey& key, int64_t request_id) {
    RecvTensorRequest request;
    request.set_step_id(step);
    request.set_rendezvous_key(std::string(key.FullKey()));
    request.set_request_id(request_id);
    request.set_protocol("grpc");
    request.set_protocol_version(kProtocolVersion);
    return request;
  }

  // Produces `bytes` under `name` and asks for them in one message, which
  // the producer answers by holding the value; `fetch` is then the request
  // that fetches it.
  void ExpectHeld(int64_t step, const std::string& name, int64_t bytes, uint32_t seed,
                  RecvTensorRequest* fetch) {
    const ParsedKey key = Key(name);
    ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, seed)}).ok());
    RecvTensorRequest request = RawRequest(step, key, step * 1000 + 1);
    request.set_single_message(true);
    grpc::Status status;
    const std::vector<RecvTensorChunk> answer = RawRecvTensor(request, &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(answer.size(), 1u);
    EXPECT_TRUE(answer[0].meta().payload_held());
    EXPECT_EQ(answer[0].meta().payload_bytes(), 0u);
    ASSERT_EQ(answer[0].meta().dims_size(), 1);
    EXPECT_EQ(answer[0].meta().dims(0), bytes);
    request.set_single_message(false);
    request.set_fetch_held(true);
    *fetch = request;
  }

  // A Recv of a large tensor that runs on another thread, blocking or async.
  struct PendingRecv {
    RecvResult result;
    std::thread thread;
    ~PendingRecv() {
      if (thread.joinable()) thread.join();
    }
  };

  void StartRecv(int64_t step, const ParsedKey& key, bool blocking, PendingRecv* pending) {
    if (!blocking) {
      consumer_->rendezvous_mgr().Find(step)->RecvAsync(key, {}, pending->result.Capture());
      return;
    }
    pending->thread = std::thread([this, step, key, pending] {
      RecvResult& result = pending->result;
      result.status = Recv(step, key, &result.value, &result.is_dead);
      result.done.Notify();
    });
  }

  // See ProducerLostMidTransferFailsTheRecvWithinThePeerTimeout. A transfer
  // may end before the producer stops: each attempt moves another tensor.
  void ExpectLossMidTransferFailsTheRecv(bool blocking) {
    DataPlane* plane = consumer_->data_plane();
    if (plane == nullptr) GTEST_SKIP() << "protocol grpc: the stream carries the bytes";
    const int64_t bytes = Capped(int64_t{256} << 20);
    // Wired up first: Debian's UCX 1.13 aborts the process when a peer dies
    // during an endpoint's wireup over tcp (an assertion that
    // openucx/ucx#8175 removed), which is not what this test is about.
    const ParsedKey warm = Key("warm");
    ASSERT_TRUE(Produce(39, {Item(warm, DType::kUInt8, {int64_t{1} << 20}, 5)}).ok());
    ASSERT_TRUE(RecvStatus(39, warm).ok());
    for (int attempt = 0; attempt < 10; ++attempt) {
      const int64_t step = 40 + attempt;
      const ParsedKey key = Key(absl::StrCat("stalled", attempt));
      ASSERT_TRUE(Produce(step, {Item(key, DType::kUInt8, {bytes}, 5)}).ok());
      PendingRecv pending;
      StartRecv(step, key, blocking, &pending);
      ASSERT_TRUE(rdv::testing::PollUntil(
          [&] { return plane->fetches_in_flight() > 0 || pending.result.done.HasBeenNotified(); }));
      ASSERT_TRUE(producer_->Signal(SIGSTOP).ok());
      if (plane->fetches_in_flight() == 0) {  // it ended before the producer stopped
        ASSERT_TRUE(producer_->Signal(SIGCONT).ok());
        ASSERT_TRUE(pending.result.Wait());
        continue;
      }
      const absl::Time stopped = absl::Now();
      producer_->Kill();
      ASSERT_TRUE(pending.result.Wait()) << "the Recv hangs on a dead producer";
      if (pending.result.status.ok()) {
        // An RDMA NIC (SoftRoCE: the kernel) serves a read without the
        // producer's process: the bytes may arrive before the kill.
        EXPECT_TRUE(GetParam().needs_rdma)
            << "a transfer that needs the producer's progress ended while it was stopped";
        EXPECT_TRUE(VerifyPattern(pending.result.value, 5).ok());
      } else {
        EXPECT_EQ(pending.result.status.code(), absl::StatusCode::kUnavailable)
            << pending.result.status;
      }
      EXPECT_LT(absl::Now() - stopped, kPeerTimeout + absl::Seconds(3));
      EXPECT_TRUE(rdv::testing::PollUntil([&] { return plane->fetches_in_flight() == 0; }))
          << "the transport never let go of the abandoned fetch";
      // The consumer keeps serving.
      ASSERT_TRUE(consumer_->rendezvous_mgr().Find(step)->Send(
          *ParsedKey::Parse(CreateRendezvousKey(kConsumerCpu, 1, kConsumerCpu, "self")), {},
          testing::FloatTensor({1}), false).ok());
      return;
    }
    GTEST_SKIP() << "every transfer ended before the producer could be stopped";
  }

  HoldingsResponse Holdings() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    HoldingsResponse holdings;
    const grpc::Status status = driver_->Holdings(&context, HoldingsRequest(), &holdings);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return holdings;
  }
  static uint64_t HeldInAll(const HoldingsResponse& holdings) {
    return holdings.transfers() + holdings.sends() + holdings.values() + holdings.cuda_ipc_lent();
  }

  void WorkerCall(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    const grpc::Status status = call(&context);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  ScopedEnv scoped_env_;  // declared first: restored after the workers are gone
  EnvChanges extra_producer_env_;
  std::unique_ptr<WorkerServer> consumer_;
  SecurityOptions security_;
  std::unique_ptr<WorkerProcess> producer_;
  std::unique_ptr<DriverService::Stub> driver_;
  std::unique_ptr<WorkerService::Stub> worker_stub_;
};

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
  const int64_t bytes = (int64_t{5} << 29) + 3;  // 2.5 GiB and a bit
  if (Capped(bytes) < bytes) GTEST_SKIP() << "RDV_TEST_MAX_BYTES is below 2.5 GiB";
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

// The data plane cannot always notice a dead peer by itself: over shared
// memory a get needs the producer's own progress, and waits for it forever.
// A producer stopped, then killed, with a transfer from it in flight leaves
// the control plane's watch to end the Recv, within the peer timeout and
// with UNAVAILABLE; the transport then lets go of the abandoned fetch.
TEST_P(RemoteConformanceTest, ProducerLostMidTransferFailsTheRecvWithinThePeerTimeout) {
  ExpectLossMidTransferFailsTheRecv(/*blocking=*/false);
}

TEST_P(RemoteConformanceTest, ProducerLostMidTransferFailsTheBlockingRecvWithinThePeerTimeout) {
  ExpectLossMidTransferFailsTheRecv(/*blocking=*/true);
}

// Where the NIC cannot bound a get to its buffer (UCX would serve it in
// software at any address), a producer's descriptor exposes no address or
// key: the producer sends the bytes, the consumer says where they land.
TEST_P(RemoteConformanceTest, DescriptorsExposeMemoryOnlyWhereTheNicBoundsTheRead) {
  DataPlane* plane = consumer_->data_plane();
  if (plane == nullptr) GTEST_SKIP() << "protocol grpc has no descriptors";
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
  if (descriptor.op() == RDV_TRANSPORT_OP_GET) {
    EXPECT_TRUE(GetParam().needs_rdma || GetParam().ucx_op != nullptr)
        << "a get descriptor where UCX serves gets in software";
  } else {
    EXPECT_EQ(descriptor.op(), RDV_TRANSPORT_OP_TAG);
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
TEST_P(RemoteConformanceTest, GarbageConsumerAddressIsRefusedAndTheProducerServesOn) {
  if (consumer_->data_plane() == nullptr) GTEST_SKIP() << "protocol grpc has no addresses";
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
TEST_P(RemoteConformanceTest, TaggedProducerServesASingleMessageConsumer) {
  if (!absl::StrContains(GetParam().protocol, "ucx")) GTEST_SKIP() << "RDV_UCX_OP is UCX's";
  RestartProducerWith("RDV_UCX_OP", "tag");
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
TEST_P(RemoteConformanceTest, TaggedSendNobodyReceivesDoesNotHoldTheProducersShutdown) {
  if (!absl::StrContains(GetParam().protocol, "ucx")) GTEST_SKIP() << "RDV_UCX_OP is UCX's";
  RestartProducerWith("RDV_UCX_OP", "tag");
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
  if (meta.meta().transport().op() != RDV_TRANSPORT_OP_TAG) {
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

// Same host, both sides on a GPU: CUDA IPC (on by default).
TEST_P(RemoteConformanceTest, GpuToGpuArrivesByteExact) {
  RDV_SKIP_WITHOUT_GPUS(1);
  ExpectTensorsCross(kProducerGpu, kConsumerGpu, 37);
}

// The producer refuses CUDA IPC: the protocol carries the bytes, staged
// through host memory on both sides.
TEST_P(RemoteConformanceTest, GpuToGpuWithoutCudaIpcIsStaged) {
  RDV_SKIP_WITHOUT_GPUS(1);
  RestartProducerWith("RDV_CUDA_IPC", "0");
  ExpectTensorsCross(kProducerGpu, kConsumerGpu, 38);
}

TEST_P(RemoteConformanceTest, GpuToHostAndHostToGpuArriveByteExact) {
  RDV_SKIP_WITHOUT_GPUS(1);
  ExpectTensorsCross(kProducerGpu, kConsumerCpu, 39);
  ExpectTensorsCross(kProducerCpu, kConsumerGpu, 40);
}

TEST_P(RemoteConformanceTest, WarmHotPathRegistersNothing) {
  DataPlane* plane = consumer_->data_plane();
  if (plane == nullptr) GTEST_SKIP() << "protocol grpc has no data plane";
  const int64_t sizes[] = {8 << 10, 64 << 10, 1 << 20};
  uint64_t registrations_when_warm = 0;
  for (int round = 0; round < 10; ++round) {
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
      << "1 000 transfers of recurring sizes registered memory after warm-up";
  EXPECT_GE(plane->allocator()->stats().reused, 900u);
}

INSTANTIATE_TEST_SUITE_P(
    Protocols, RemoteConformanceTest,
    ::testing::Values(ProtocolSetting{"grpc", "grpc", nullptr},
                      ProtocolSetting{"grpc_ucx_tcp", "grpc+ucx", "tcp"},
                      ProtocolSetting{"grpc_ucx_shm", "grpc+ucx", "posix,cma,self"},
                      // Gets forced where UCX serves them in software: a
                      // user's choice (RDV_UCX_OP), and the one transfer a
                      // lost peer leaves for the control plane to end.
                      ProtocolSetting{"grpc_ucx_shm_get", "grpc+ucx", "posix,cma,self", false,
                                      "get"},
                      ProtocolSetting{"grpc_verbs", "grpc+verbs", nullptr, true},
                      // UCX over SoftRoCE needs UCX_UD_VERBS_ETH_DGID_CHECK=n.
                      ProtocolSetting{"grpc_ucx_rdma", "grpc+ucx", "rc_verbs,ud_verbs", true}),
    [](const ::testing::TestParamInfo<ProtocolSetting>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace rdv::control
