// The loader against real and deliberately broken plugins, and the
// registration cache and pool against the real UCX transport; the
// conformance cases run against every transport plugin.
#include "plugin/transport.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/caching_allocator.h"
#include "core/notification.h"
#include "plugin/registration_cache.h"
#include "plugin/transport_allocator.h"

namespace rdv::plugin {
namespace {

class TransportLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("RDV_PLUGIN_PATH", RDV_BROKEN_PLUGIN_DIR, 1); }
  void TearDown() override { unsetenv("RDV_PLUGIN_PATH"); }
};

TEST_F(TransportLoaderTest, WrongAbiVersionIsRefusedClearly) {
  auto transport = Transport::Load("wrongabi");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_wrongabi.so"), std::string::npos) << message;
  EXPECT_NE(message.find("ABI version 99"), std::string::npos) << message;
  EXPECT_NE(message.find("needs version 2"), std::string::npos) << message;
}

TEST_F(TransportLoaderTest, MissingEntryPointIsRefusedClearly) {
  auto transport = Transport::Load("nosymbol");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_nosymbol.so"), std::string::npos) << message;
  EXPECT_NE(message.find("rdv_transport_v2"), std::string::npos) << message;
}

TEST_F(TransportLoaderTest, UnknownTransportSaysWhereItLooked) {
  auto transport = Transport::Load("carrierpigeon");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kNotFound);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_carrierpigeon.so"), std::string::npos);
  EXPECT_NE(message.find(RDV_BROKEN_PLUGIN_DIR), std::string::npos) << message;
}

// Loads `name`, or says why the test cannot run here: the verbs transport
// needs an RDMA device (tests/softroce runs these inside a SoftRoCE guest,
// with RDV_TEST_REQUIRE_RDMA=1 so that a missing device fails instead).
// RDV_TEST_PEER_IB_DEVICE puts the peer context on another device.
std::shared_ptr<Transport> LoadOrSkip(const std::string& name, bool peer = false) {
  const char* peer_device = std::getenv("RDV_TEST_PEER_IB_DEVICE");
  const char* own_device = std::getenv("RDV_IB_DEVICE");
  const std::string saved = own_device ? own_device : "";
  if (peer && peer_device != nullptr) setenv("RDV_IB_DEVICE", peer_device, 1);
  auto transport = Transport::Load(name);
  if (peer && peer_device != nullptr) {
    own_device ? setenv("RDV_IB_DEVICE", saved.c_str(), 1) : unsetenv("RDV_IB_DEVICE");
  }
  if (!transport.ok() && absl::IsUnavailable(transport.status()) &&
      std::getenv("RDV_TEST_REQUIRE_RDMA") == nullptr) {
    return nullptr;
  }
  EXPECT_TRUE(transport.ok()) << transport.status();
  return transport.ok() ? *transport : nullptr;
}

#define RDV_LOAD_OR_SKIP(var, ...)                                                   \
  auto var = LoadOrSkip(__VA_ARGS__);                                                \
  if (var == nullptr) {                                                              \
    if (HasFailure()) return;                                                        \
    GTEST_SKIP() << "no device for transport " << GetParam() << " on this machine";  \
  }

// Moves `length` bytes from `source` (in `from`) to `destination` (in `to`)
// with get (or put), through an endpoint of `to` (or `from`).
absl::Status Move(Transport& from, TransportMemory& source, Transport& to,
                  TransportMemory& destination, size_t length, bool put) {
  Transport& actor = put ? from : to;
  Transport& peer = put ? to : from;
  auto endpoint = actor.Connect(*peer.LocalAddress());
  if (!endpoint.ok()) return endpoint.status();
  Notification done;
  absl::Status status;
  auto on_done = [&](absl::Status s) {
    status = s;
    done.Notify();
  };
  if (put) {
    actor.Put(**endpoint, source.address(), source,
              reinterpret_cast<uint64_t>(destination.address()), destination.remote_key(),
              length, on_done);
  } else {
    actor.Get(**endpoint, destination.address(), destination,
              reinterpret_cast<uint64_t>(source.address()), source.remote_key(), length, on_done);
  }
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError("the transfer did not complete in 60 s");
  }
  return status;
}

void Fill(TransportMemory& memory, int seed) {
  auto* bytes = static_cast<unsigned char*>(memory.address());
  for (size_t i = 0; i < memory.length(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + seed);
}

// Every transport plugin passes these.
class TransportConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TransportConformanceTest, LoadsAndDescribesItself) {
  RDV_LOAD_OR_SKIP(transport, GetParam());
  EXPECT_EQ(transport->name(), GetParam());
  EXPECT_FALSE(transport->description().empty());
  auto address = transport->LocalAddress();
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_FALSE(address->empty());
}

// Fresh contexts per direction: each test moves bytes one way.
void MovesBytesBetweenTwoContexts(const std::shared_ptr<Transport>& a,
                                  const std::shared_ptr<Transport>& b, bool put) {
  // Several chunks and an odd tail.
  const size_t length = (size_t{3} << 20) + 123;
  auto source = a->Allocate(length);
  auto destination = b->Allocate(length);
  ASSERT_TRUE(source.ok() && destination.ok());
  Fill(**source, 1);
  std::memset((*destination)->address(), 0, length);
  const absl::Status status = Move(*a, **source, *b, **destination, length, put);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::memcmp((*destination)->address(), (*source)->address(), length), 0) << (put ? "put" : "get");
}

TEST_P(TransportConformanceTest, GetMovesBytesBetweenTwoContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/false);
}

// Each move makes its own endpoint, in alternating directions: an endpoint
// closed between the same two contexts must not spoil the next one (UCX
// lost puts silently after a forced close).
TEST_P(TransportConformanceTest, EndpointsComeAndGoBetweenTheSameContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  for (const bool put : {false, true, false, true}) {
    MovesBytesBetweenTwoContexts(a, b, put);
    if (HasFailure()) return;
  }
}

TEST_P(TransportConformanceTest, PutMovesBytesBetweenTwoContexts) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/true);
}

TEST_P(TransportConformanceTest, ForgedRemoteKeyIsAnErrorNotACrash) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  auto destination = a->Allocate(4096);
  auto endpoint = a->Connect(*a->LocalAddress());
  ASSERT_TRUE(destination.ok() && endpoint.ok());
  Notification done;
  absl::Status status;
  a->Get(**endpoint, (*destination)->address(), **destination, 0x1000, "not a key", 4096,
         [&](absl::Status s) {
           status = s;
           done.Notify();
         });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

// An address made up, or a real one cut short, is refused before the
// transport library parses it (UCX aborts the process on a garbage one).
TEST_P(TransportConformanceTest, ForgedAddressIsAnErrorNotACrash) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  const std::string address = *a->LocalAddress();
  for (const std::string& forged :
       {std::string(), std::string("garbage"), std::string(address.size(), '\xff'),
        address.substr(0, address.size() - 1), address + "x"}) {
    auto endpoint = a->Connect(forged);
    EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kInvalidArgument)
        << forged.size() << " bytes: " << endpoint.status();
  }
}

// An aborted endpoint ends what is in flight (once each, with its result
// or CANCELLED), refuses more with UNAVAILABLE, and a new endpoint between
// the same two contexts works.
TEST_P(TransportConformanceTest, AbortedEndpointEndsItsTransfersAndRefusesMore) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  const size_t length = size_t{16} << 20;
  auto source = a->Allocate(length);
  auto destination = b->Allocate(length);
  auto endpoint = b->Connect(*a->LocalAddress());
  ASSERT_TRUE(source.ok() && destination.ok() && endpoint.ok());
  Notification done;
  std::atomic<int> calls{0};
  absl::Status status;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), length,
         [&](absl::Status s) {
           status = s;
           if (calls.fetch_add(1) == 0) done.Notify();
         });
  (*endpoint)->Abort();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok() || absl::IsCancelled(status)) << status;
  Notification refused;
  absl::Status after;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), length,
         [&](absl::Status s) {
           after = s;
           refused.Notify();
         });
  ASSERT_TRUE(refused.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
  endpoint->reset();
  EXPECT_EQ(calls.load(), 1);
  MovesBytesBetweenTwoContexts(a, b, /*put=*/false);
}

// A tagged receive no send matched ends with CANCELLED when cancelled; a
// tag nothing waits under is NOT_FOUND.
TEST_P(TransportConformanceTest, CancelledRecvEndsWithCancelled) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  if (!(a->supported_ops() & RDV_TRANSPORT_OP_TAG)) {
    EXPECT_EQ(a->CancelRecv(7).code(), absl::StatusCode::kNotFound);
    GTEST_SKIP() << GetParam() << " offers no tagged messages";
  }
  auto destination = a->Allocate(4096);
  ASSERT_TRUE(destination.ok());
  Notification done;
  absl::Status status;
  a->Recv((*destination)->address(), 4096, 7, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(a->CancelRecv(7).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(a->CancelRecv(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->CancelRecv(8).code(), absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportConformanceTest,
                         ::testing::Values("ucx", "verbs"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

// A genuine key used beyond its region: the NIC refuses the READ, the QP
// goes to the error state, the transfer fails with the completion's status,
// and a new endpoint (a new QP) moves the next transfer.
class VerbsTransportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VerbsTransportTest, RemoteAccessErrorFailsTheTransferAndANewEndpointRecovers) {
  RDV_LOAD_OR_SKIP(a, GetParam());
  RDV_LOAD_OR_SKIP(b, GetParam(), /*peer=*/true);
  auto source = a->Allocate(4096);
  auto destination = b->Allocate(8192);
  ASSERT_TRUE(source.ok() && destination.ok());
  Fill(**source, 3);
  auto endpoint = b->Connect(*a->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  Notification done;
  absl::Status status;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), 8192,
         [&](absl::Status s) {
           status = s;
           done.Notify();
         });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("remote access error"), std::string::npos) << status;

  // The old QP is out of service and says so at once.
  Notification refused;
  b->Get(**endpoint, (*destination)->address(), **destination,
         reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), 4096,
         [&](absl::Status s) {
           status = s;
           refused.Notify();
         });
  ASSERT_TRUE(refused.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

  ASSERT_TRUE(Move(*a, **source, *b, **destination, 4096, /*put=*/false).ok());
  EXPECT_EQ(std::memcmp((*destination)->address(), (*source)->address(), 4096), 0);
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsTransportTest, ::testing::Values("verbs"));

// Sets (or, given nullptr, unsets) one environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { saved_ ? setenv(name_, saved_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// rdv's UCX segment defaults apply only where UCX may open a transport that
// reads them and the user has not chosen: UCX warns of a setting no
// interface takes.
TEST(UcxTransportTest, TunesSegmentsOnlyWhereTheirTransportIsAllowedAndUnset) {
  const struct {
    const char* tls;
    const char* user_variable;  // set to a value of the user's, or null
    bool tcp_tuned;
    bool mm_tuned;
  } cases[] = {
      {"tcp", nullptr, true, false},
      {"posix,cma,self", nullptr, false, true},
      {"sm,self", nullptr, false, true},
      {"all", nullptr, true, true},
      {"^tcp", nullptr, false, true},
      {"^sm", nullptr, true, false},
      {"^posix", nullptr, true, true},
      {"tcp", "UCX_TCP_RX_SEG_SIZE", false, false},
      {"posix,cma,self", "UCX_SYSV_SEG_SIZE", false, false},
  };
  for (const auto& c : cases) {
    ScopedEnv tls("UCX_TLS", c.tls);
    ScopedEnv tcp("UCX_TCP_RX_SEG_SIZE", nullptr);
    ScopedEnv sysv("UCX_SYSV_SEG_SIZE", nullptr);
    std::optional<ScopedEnv> user;
    if (c.user_variable != nullptr) user.emplace(c.user_variable, "16K");
    auto transport = Transport::Load("ucx");
    ASSERT_TRUE(transport.ok()) << transport.status();
    const std::string description = (*transport)->description();
    EXPECT_EQ(description.find("UCX_TCP_RX_SEG_SIZE=1M") != std::string::npos, c.tcp_tuned)
        << "UCX_TLS=" << c.tls << ": " << description;
    EXPECT_EQ(description.find("UCX_{POSIX,SYSV}_SEG_SIZE=56K") != std::string::npos, c.mm_tuned)
        << "UCX_TLS=" << c.tls << ": " << description;
  }
}

// Tagged messages only where UCX_TLS leaves tcp alone between processes;
// one-sided gets wherever shared memory or RDMA may be used.
// A get only where the NIC bounds it to the descriptor's tensor (RC, DC);
// anywhere UCX could serve it in software, the producer sends instead.
TEST(UcxTransportTest, GetsOnlyWhereTheNicConfinesTheRead) {
  const struct {
    const char* tls;
    bool tagged;
  } cases[] = {{"tcp", true},          {"tcp,self", true},          {"^tcp", true},
               {"sm,tcp", true},       {"rc_verbs,tcp", true},      {"posix,cma,self", true},
               {"ud_verbs", true},     {"rc_verbs,ud_verbs", false}, {"rc_verbs,self", false},
               {"dc_mlx5", false},     {"ib", false}};
  ScopedEnv op("RDV_UCX_OP", nullptr);
  ScopedEnv unset_tls("UCX_TLS", nullptr);
  {
    auto transport = Transport::Load("ucx");
    ASSERT_TRUE(transport.ok()) << transport.status();
    EXPECT_EQ((*transport)->preferred_op(), RDV_TRANSPORT_OP_TAG) << "UCX_TLS unset";
  }
  const bool require_rdma = std::getenv("RDV_TEST_REQUIRE_RDMA") != nullptr;
  for (const auto& c : cases) {
    ScopedEnv tls("UCX_TLS", c.tls);
    auto transport = Transport::Load("ucx");
    // RDMA-only settings load where a device is (tests/softroce).
    if (!transport.ok() && !require_rdma &&
        absl::StrContains(transport.status().message(), "No such device")) {
      continue;
    }
    ASSERT_TRUE(transport.ok()) << c.tls << ": " << transport.status();
    EXPECT_EQ((*transport)->preferred_op() == RDV_TRANSPORT_OP_TAG, c.tagged)
        << "UCX_TLS=" << c.tls << ": " << (*transport)->description();
  }
}

TEST(UcxTransportTest, RefusesAnUnknownOp) {
  ScopedEnv op("RDV_UCX_OP", "put");
  auto transport = Transport::Load("ucx");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(transport.status().message().find("RDV_UCX_OP='put'"), absl::string_view::npos)
      << transport.status();
}

// UCX would hang at the first transfer of a 64 KiB segment or more.
TEST(UcxTransportTest, RefusesSharedMemorySegmentsThatHangUcx) {
  ScopedEnv tls("UCX_TLS", "posix,cma,self");
  for (const char* name : {"UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_SEG_SIZE"}) {
    ScopedEnv segment(name, "64K");
    auto transport = Transport::Load("ucx");
    ASSERT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument) << name;
    const std::string message(transport.status().message());
    EXPECT_NE(message.find(std::string(name) + "=64K"), std::string::npos) << message;
    EXPECT_NE(message.find("at most 60000"), std::string::npos) << message;
  }
  ScopedEnv accepted("UCX_POSIX_SEG_SIZE", "60000");
  EXPECT_TRUE(Transport::Load("ucx").ok());
}

TEST(TransportAllocatorTest, RecurringSizesReuseMemory) {
  auto transport = Transport::Load("ucx");
  ASSERT_TRUE(transport.ok());
  auto pool = std::make_shared<TransportAllocator>(*transport, size_t{64} << 20);
  for (int round = 0; round < 100; ++round) {
    for (size_t size : {size_t{100}, size_t{5000}, size_t{3} << 20}) {
      auto ptr = pool->Allocate(size);
      ASSERT_TRUE(ptr.ok()) << ptr.status();
      EXPECT_NE(pool->Find(*ptr, size), nullptr);
      pool->Deallocate(*ptr, size);
    }
  }
  EXPECT_EQ(pool->stats().registrations, 3u) << "a warm pool registered again";
  EXPECT_EQ(pool->stats().reused, 297u);
  EXPECT_EQ(AllocationSizeClass(5000), 8192u);
  EXPECT_EQ(AllocationSizeClass((size_t{3} << 20) + 1), size_t{4} << 20);
}

TEST(RegistrationCacheTest, HitMissInvalidationEviction) {
  auto transport = Transport::Load("ucx");
  ASSERT_TRUE(transport.ok());
  RegistrationCache cache(*transport, nullptr, size_t{1} << 20);
  static std::vector<char> storage(size_t{4} << 20);
  auto wrap = [](size_t offset, size_t size) {
    return Buffer::Wrap(storage.data() + offset, size, MemoryLocation::Host(), nullptr);
  };
  auto first = wrap(0, 512 << 10);
  ASSERT_TRUE(cache.Lookup(first).ok());
  ASSERT_TRUE(cache.Lookup(first).ok());
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().hits, 1u);

  first.reset();  // freed; another buffer appears at the same address
  auto second = wrap(0, 512 << 10);
  ASSERT_TRUE(cache.Lookup(second).ok());
  EXPECT_EQ(cache.stats().invalidations, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);

  auto third = wrap(size_t{1} << 20, 768 << 10);  // over the 1 MiB bound
  ASSERT_TRUE(cache.Lookup(third).ok());
  EXPECT_GE(cache.stats().evictions, 1u);
  EXPECT_LE(cache.stats().bytes_registered, size_t{1} << 20);
}

TEST(RegistrationCacheTest, PoolMemoryNeedsNoRegistration) {
  auto transport = Transport::Load("ucx");
  ASSERT_TRUE(transport.ok());
  auto pool = std::make_shared<TransportAllocator>(*transport, size_t{64} << 20);
  RegistrationCache cache(*transport, pool, size_t{64} << 20);
  auto buffer = Buffer::Allocate(pool, 1 << 20);
  ASSERT_TRUE(buffer.ok());
  auto registration = cache.Lookup(*buffer);
  ASSERT_TRUE(registration.ok());
  EXPECT_EQ(cache.stats().pool_hits, 1u);
  EXPECT_EQ(cache.stats().misses, 0u);
}

}  // namespace
}  // namespace rdv::plugin
