// The loader against real and deliberately broken plugins, and the
// registration cache and pool against the real UCX transport.
#include "plugin/transport.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
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
  EXPECT_NE(message.find("needs version 1"), std::string::npos) << message;
}

TEST_F(TransportLoaderTest, MissingEntryPointIsRefusedClearly) {
  auto transport = Transport::Load("nosymbol");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_nosymbol.so"), std::string::npos) << message;
  EXPECT_NE(message.find("rdv_transport_v1"), std::string::npos) << message;
}

TEST_F(TransportLoaderTest, UnknownTransportSaysWhereItLooked) {
  auto transport = Transport::Load("carrierpigeon");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kNotFound);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_carrierpigeon.so"), std::string::npos);
  EXPECT_NE(message.find(RDV_BROKEN_PLUGIN_DIR), std::string::npos) << message;
}

TEST(UcxTransportTest, LoadsAndDescribesItself) {
  auto transport = Transport::Load("ucx");
  ASSERT_TRUE(transport.ok()) << transport.status();
  EXPECT_EQ((*transport)->name(), "ucx");
  EXPECT_NE((*transport)->description().find("UCX"), std::string::npos);
  auto address = (*transport)->LocalAddress();
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_FALSE(address->empty());
}

TEST(UcxTransportTest, GetMovesBytesBetweenTwoContexts) {
  auto a = Transport::Load("ucx");
  auto b = Transport::Load("ucx");
  ASSERT_TRUE(a.ok() && b.ok());
  auto source = (*a)->Allocate(1 << 20);
  auto destination = (*b)->Allocate(1 << 20);
  ASSERT_TRUE(source.ok() && destination.ok());
  auto* bytes = static_cast<unsigned char*>((*source)->address());
  for (int i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  auto endpoint = (*b)->Connect(*(*a)->LocalAddress());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  Notification done;
  absl::Status status;
  (*b)->Get(**endpoint, (*destination)->address(), **destination,
            reinterpret_cast<uint64_t>((*source)->address()), (*source)->remote_key(), 1 << 20,
            [&](absl::Status s) {
              status = s;
              done.Notify();
            });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::memcmp((*destination)->address(), bytes, 1 << 20), 0);
}

TEST(UcxTransportTest, ForgedRemoteKeyIsAnErrorNotACrash) {
  auto a = Transport::Load("ucx");
  ASSERT_TRUE(a.ok());
  auto destination = (*a)->Allocate(4096);
  auto endpoint = (*a)->Connect(*(*a)->LocalAddress());
  ASSERT_TRUE(destination.ok() && endpoint.ok());
  Notification done;
  absl::Status status;
  (*a)->Get(**endpoint, (*destination)->address(), **destination, 0x1000, "not a key", 4096,
            [&](absl::Status s) {
              status = s;
              done.Notify();
            });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
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
  EXPECT_EQ(TransportAllocator::RoundUp(5000), 8192u);
  EXPECT_EQ(TransportAllocator::RoundUp((size_t{3} << 20) + 1), size_t{4} << 20);
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
