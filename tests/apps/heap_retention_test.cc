#include "apps/heap_retention.h"

#include <malloc.h>
#include <stdlib.h>

#include <cstddef>
#include <cstring>

#include "core/sanitizers.h"
#include "gtest/gtest.h"

namespace rdv {
namespace {

// glibc reads its own settings at start, so these tests only check that
// rdv's are not applied over them: the thresholds stay glibc's.
TEST(HeapRetentionTest, AUserSettingOfGlibcWins) {
  if (kSanitizedBuild) GTEST_SKIP() << "a sanitizer's allocator stands in for glibc's";
  ASSERT_EQ(setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1), 0);
  EXPECT_FALSE(KeepFreedHeap());
  ASSERT_EQ(unsetenv("MALLOC_TRIM_THRESHOLD_"), 0);
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072", 1), 0);
  EXPECT_FALSE(KeepFreedHeap());
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
}

TEST(HeapRetentionTest, AFreedMegabyteAtTheHeapsTopStaysWithTheProcess) {
  if (kSanitizedBuild) GTEST_SKIP() << "a sanitizer's allocator stands in for glibc's";
  ASSERT_TRUE(KeepFreedHeap());
  constexpr size_t kBlock = size_t{1} << 20;
  const size_t mapped_before = mallinfo2().hblks;
  auto* block = static_cast<char*>(malloc(kBlock));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  // From the heap: glibc's first threshold, 128 KiB, would map it alone.
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  free(block);
  // Still there, where the 128 KiB trim threshold would have returned it.
  EXPECT_GE(mallinfo2().keepcost, kBlock);
}

}  // namespace
}  // namespace rdv
