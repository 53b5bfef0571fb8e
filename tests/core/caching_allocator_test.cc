#include "core/caching_allocator.h"

#include <cstring>

#include "gtest/gtest.h"

namespace rdv {
namespace {

TEST(CachingAllocatorTest, SizeClasses) {
  EXPECT_EQ(AllocationSizeClass(1), 4096u);
  EXPECT_EQ(AllocationSizeClass(5000), 8192u);
  EXPECT_EQ(AllocationSizeClass(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(AllocationSizeClass((size_t{3} << 20) + 1), size_t{4} << 20);
}

TEST(CachingAllocatorTest, RecurringSizesReuseFreedMemory) {
  CachingAllocator cache(HostAllocator(), size_t{64} << 20);
  for (int round = 0; round < 10; ++round) {
    for (size_t size : {size_t{100}, size_t{5000}, size_t{3} << 20}) {
      absl::StatusOr<void*> block = cache.Allocate(size);
      ASSERT_TRUE(block.ok()) << block.status();
      std::memset(*block, 0xab, size);  // the whole size is usable (ASan checks)
      cache.Deallocate(*block, size);
    }
  }
  EXPECT_EQ(cache.stats().allocations, 30u);
  EXPECT_EQ(cache.stats().reused, 27u);
  EXPECT_EQ(cache.stats().bytes_cached, 4096u + 8192u + (size_t{3} << 20));
}

TEST(CachingAllocatorTest, FreeMemoryBeyondTheBoundGoesBackLargestFirst) {
  CachingAllocator cache(HostAllocator(), size_t{1} << 20);
  absl::StatusOr<void*> small = cache.Allocate(4096);
  absl::StatusOr<void*> large = cache.Allocate(size_t{2} << 20);
  ASSERT_TRUE(small.ok() && large.ok());
  cache.Deallocate(*small, 4096);
  cache.Deallocate(*large, size_t{2} << 20);
  EXPECT_EQ(cache.stats().bytes_cached, 4096u) << "the 2 MiB block exceeds the 1 MiB bound";
  absl::StatusOr<void*> again = cache.Allocate(4096);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *small);
  EXPECT_EQ(cache.stats().reused, 1u);
  cache.Deallocate(*again, 4096);
}

}  // namespace
}  // namespace rdv
