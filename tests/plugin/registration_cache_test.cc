// The transport pool and the registration cache against the real UCX
// transport: recurring sizes and buffers register once.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "core/buffer.h"
#include "core/caching_allocator.h"
#include "plugin/registration_cache.h"
#include "plugin/transport.h"
#include "plugin/transport_allocator.h"

namespace rdv::plugin {
namespace {

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
