// The fixture of the cross-process conformance suite (its cases are in
// remote_conformance_test.cc, remote_failure_test.cc,
// remote_protocol_test.cc and remote_fast_path_test.cc, one binary; the
// fast path's fixtures in remote_fast_path.h): this test process runs the
// consumer worker (task 1, an embedded WorkerServer) and spawns the
// producer worker (task 0, a real rdv-worker with its driver on) on
// 127.0.0.1. Every protocol instantiates it; every wait is bounded.
//
// Across hosts or containers: with RDV_TEST_LAUNCHER=host:port an
// rdv-launcher there runs the producer, listening on that host, and the
// consumer listens on RDV_TEST_LISTEN_HOST (an address of this host the
// other one reaches).
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "control/data_plane.h"
#include "control/protocol.h"
#include "control/security.h"
#include "control/tensor_codec.h"
#include "control/tensor_pattern.h"
#include "control/worker_cache.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "core/cuda.h"
#include "core/device_copy.h"
#include "gtest/gtest.h"
#include "tests/control/conformance_settings.h"
#include "tests/test_util.h"

namespace rdv::control::remote_test {

using testing::kWaitLimit;
using testing::RecvResult;

constexpr char kProducerCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kConsumerCpu[] = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr char kProducerGpu[] = "/job:worker/replica:0/task:0/device:GPU:0";
constexpr char kConsumerGpu[] = "/job:worker/replica:0/task:1/device:GPU:0";
// The consumer's peer timeout: RDV_TEST_PEER_TIMEOUT_MS, else 2 s. The
// Docker forms, under emulation, give a TLS handshake more.
inline absl::Duration TestPeerTimeout() {
  const char* text = std::getenv("RDV_TEST_PEER_TIMEOUT_MS");
  return absl::Milliseconds(text == nullptr ? 2000 : std::strtoll(text, nullptr, 10));
}
inline const absl::Duration kPeerTimeout = TestPeerTimeout();

// The largest tensor a test moves: RDV_TEST_MAX_BYTES, where the wire is
// slow (SoftRoCE under emulation moves tens of MB/s).
inline int64_t Capped(int64_t bytes) {
  const char* text = std::getenv("RDV_TEST_MAX_BYTES");
  return text == nullptr ? bytes : std::min<int64_t>(bytes, std::strtoll(text, nullptr, 10));
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
    if (GetParam().needs_rdma && !rdv::testing::HaveRdmaDevice()) {
      if (std::getenv("RDV_TEST_REQUIRE_RDMA") != nullptr) FAIL() << "no RDMA device";
      GTEST_SKIP() << "no RDMA device on this machine (tests/softroce runs these)";
    }
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
    options.data_plane.transport_settings = TransportSettingsOf(GetParam());
    options.control.fast_path = GetParam().fast_path;
    options.control.fast_path_writes = GetParam().fast_path_writes;
    options.control.fast_path_reads = GetParam().fast_path_reads;
    options.control.read_ahead_bytes = read_ahead_bytes_;
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

  // The consumer's ControlOptions::read_ahead_bytes; a fixture that sets it
  // does so before SetUp.
  size_t read_ahead_bytes_ = ControlOptions().read_ahead_bytes;

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
        absl::StrCat("--cluster=worker=127.0.0.1:1,", consumer_->address()),
        absl::StrCat("--transport_settings=", TransportSettingsFlag(GetParam()))};
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

  // The transport settings both workers of `setting` run with: its tls (UCX's
  // own choice, "all", when it names none, whatever UCX_TLS this process
  // inherited) and op.
  static plugin::TransportSettings TransportSettingsOf(const ProtocolSetting& setting) {
    if (!absl::StrContains(setting.protocol, "ucx")) return {};
    plugin::TransportSettings settings{{"tls", setting.ucx_tls ? setting.ucx_tls : "all"}};
    if (setting.ucx_op != nullptr) settings["op"] = setting.ucx_op;
    if (setting.ucx_memory != nullptr) settings["memory"] = setting.ucx_memory;
    return settings;
  }

  // The producer's, as rdv-worker's --transport_settings, with
  // RDV_TEST_PEER_IB_DEVICE's device (so that the bytes cross the wire
  // between two devices) and `extra_producer_settings_`.
  std::string TransportSettingsFlag(const ProtocolSetting& setting) const {
    plugin::TransportSettings settings = TransportSettingsOf(setting);
    const char* peer = std::getenv("RDV_TEST_PEER_IB_DEVICE");
    if (setting.needs_rdma && peer != nullptr && absl::StrContains(setting.protocol, "verbs")) {
      settings["device"] = peer;
    }
    for (const auto& [name, value] : extra_producer_settings_) settings[name] = value;
    return absl::StrJoin(settings, ";", absl::PairFormatter("="));
  }

  // What the producer runs under beside its own host's environment: UCX's
  // variables for RDMA, with RDV_TEST_PEER_IB_DEVICE another device.
  EnvChanges ProducerEnv() const {
    EnvChanges env = extra_producer_env_;
    const ProtocolSetting& setting = GetParam();
    env.emplace_back("RDV_FAST_PATH", setting.fast_path ? "1" : "0");
    env.emplace_back("RDV_FAST_PATH_WRITES", setting.fast_path_writes ? "1" : "0");
    env.emplace_back("RDV_FAST_PATH_READS", setting.fast_path_reads ? "1" : "0");
    if (!setting.needs_rdma) return env;
    if (setting.ucx_tls != nullptr) env.emplace_back("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
    if (const char* peer = std::getenv("RDV_TEST_PEER_IB_DEVICE")) {
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

  // Restarts the producer with the transport setting `name` (the plugin's
  // name for it) set to `value`.
  void RestartProducerWithSetting(const char* name, const char* value) {
    ASSERT_EQ(producer_->Stop(), 0);
    producer_.reset();
    extra_producer_settings_[name] = value;
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

  // Receives the next value of `key` in `step` and checks its bytes.
  void ExpectPattern(int64_t step, const ParsedKey& key, uint32_t seed, size_t bytes) {
    Tensor value;
    bool is_dead = true;
    const absl::Status status = Recv(step, key, &value, &is_dead);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_FALSE(is_dead);
    EXPECT_EQ(value.TotalBytes(), bytes);
    EXPECT_TRUE(VerifyPattern(value, seed).ok()) << "seed " << seed;
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
  // `recurring`: each attempt's key is received once whole first, so that
  // the stalled Recv is its second value (the fast path's, where it is on).
  void ExpectLossMidTransferFailsTheRecv(bool blocking, bool recurring = false) {
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
      std::vector<ProduceItem> items(recurring ? 2 : 1, Item(key, DType::kUInt8, {bytes}, 5));
      ASSERT_TRUE(Produce(step, std::move(items)).ok());
      if (recurring) {
        ASSERT_TRUE(RecvStatus(step, key).ok());
      }
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
        // producer's process, and so does a copy from its mapped
        // allocation (RDV_UCX_MEMORY, mapped by default over shared memory
        // alone): the bytes may arrive before the kill.
        EXPECT_TRUE(GetParam().needs_rdma || LendsMappedValues(GetParam()))
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

  // A worker's GetStats counter `name` with `label` = `value` (or without
  // labels when `label` is empty); 0 when absent.
  static double CounterOf(const GetStatsResponse& stats, absl::string_view name,
                          absl::string_view label = "", absl::string_view value = "") {
    double sum = 0;
    for (const StatsCounter& counter : stats.counters()) {
      if (counter.name() != name) continue;
      auto it = counter.labels().find(std::string(label));
      if (label.empty() || (it != counter.labels().end() && it->second == value)) {
        sum += counter.value();
      }
    }
    return sum;
  }
  GetStatsResponse StatsOf(const std::string& address) {
    auto stub = WorkerService::NewStub(CreateMemberChannel(address, security_, {}));
    GetStatsResponse stats;
    WorkerCall([&](grpc::ClientContext* context) {
      return stub->GetStats(context, GetStatsRequest(), &stats);
    });
    return stats;
  }

  void WorkerCall(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    const grpc::Status status = call(&context);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  ScopedEnv scoped_env_;  // declared first: restored after the workers are gone
  EnvChanges extra_producer_env_;
  plugin::TransportSettings extra_producer_settings_;
  std::unique_ptr<WorkerServer> consumer_;
  SecurityOptions security_;
  std::unique_ptr<WorkerProcess> producer_;
  std::unique_ptr<DriverService::Stub> driver_;
  std::unique_ptr<WorkerService::Stub> worker_stub_;
};

// Cases that only some settings can run are suites of their own,
// instantiated on those settings alone (remote_conformance_test.cc): a skip
// in a case's body comes after SetUp started both workers, seconds each
// under emulation.
class RemoteDataPlaneTest : public RemoteConformanceTest {};  // not protocol grpc
class RemoteUcxTest : public RemoteConformanceTest {};        // grpc+ucx
// Every setting, where there is a GPU: without one, skipped before SetUp
// starts the workers.
class RemoteGpuTest : public RemoteConformanceTest {
 protected:
  void SetUp() override {
    RDV_SKIP_WITHOUT_GPUS(1);
    RemoteConformanceTest::SetUp();
  }
};

}  // namespace rdv::control::remote_test
