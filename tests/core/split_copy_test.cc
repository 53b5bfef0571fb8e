#include "core/split_copy.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <thread>
#include <vector>

#include "core/sanitizers.h"
#include "gtest/gtest.h"

namespace rdv {
namespace {

constexpr size_t kGuard = 4096;
constexpr uint8_t kGuardByte = 0xA5;

std::vector<uint8_t> Pattern(size_t length, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  uint32_t state = seed * 2654435761u + 1;
  for (uint8_t& byte : bytes) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<uint8_t>(state >> 24);
  }
  return bytes;
}

using CopyFunction = std::function<void(void* destination, const void* source, size_t length)>;

// Copies `length` bytes by `copy` into the middle of a guarded buffer,
// `shift` bytes past a page: every byte arrives, and none around the
// destination changes.
void ExpectExactCopy(const CopyFunction& copy, size_t length, uint32_t seed, size_t shift = 0) {
  const std::vector<uint8_t> source = Pattern(length + shift, seed);
  std::vector<uint8_t> destination(length + 2 * kGuard, kGuardByte);
  copy(destination.data() + kGuard, source.data() + shift, length);
  ASSERT_TRUE(std::equal(source.begin() + shift, source.end(), destination.begin() + kGuard))
      << length << " bytes";
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(destination[i], kGuardByte) << "before, at " << i;
    ASSERT_EQ(destination[kGuard + length + i], kGuardByte) << "after, at " << i;
  }
}

void ExpectExactCopy(SplitCopier& copier, size_t length, uint32_t seed) {
  ExpectExactCopy([&copier](void* to, const void* from, size_t n) { copier.Copy(to, from, n); },
                  length, seed);
}

TEST(LargeCopyTest, EachMethodCopiesEveryByteAtAnyAlignment) {
  for (const LargeCopyMethod method : {LargeCopyMethod::kMemcpy, LargeCopyMethod::kRepMovsb}) {
    const CopyFunction copy = [method](void* to, const void* from, size_t n) {
      CopyLarge(method, to, from, n);
    };
    for (const size_t length : {size_t{0}, size_t{1}, size_t{63}, size_t{4097},
                                size_t{256} << 10, (size_t{1} << 20) + 3}) {
      for (const size_t shift : {0, 1, 7, 64}) {
        SCOPED_TRACE(testing::Message() << "method " << static_cast<int>(method) << ", shift "
                                        << shift);
        ExpectExactCopy(copy, length, static_cast<uint32_t>(length + shift), shift);
      }
    }
  }
}

// Sanitizers see no copy an instruction makes, so they keep memcpy.
TEST(LargeCopyTest, TheMachinesMethodIsStableAndSanitizedBuildsUseMemcpy) {
  const LargeCopyMethod method = MachineLargeCopyMethod();
  EXPECT_EQ(MachineLargeCopyMethod(), method);
  if (kSanitizedBuild) {
    EXPECT_EQ(method, LargeCopyMethod::kMemcpy);
  }
}

TEST(SplitCopierTest, CopiesEveryByteOfSmallAndSplitLengths) {
  SplitCopier copier;
  const size_t min = SplitCopier::kMinSplitBytes;
  for (size_t length : {size_t{0}, size_t{1}, size_t{4096}, min - 1, min, min + 1, min + 63,
                        3 * min + 17}) {
    ExpectExactCopy(copier, length, static_cast<uint32_t>(length));
  }
}

TEST(SplitCopierTest, ConcurrentCopiesEachArriveWhole) {
  SplitCopier copier;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&copier, t] {
      for (uint32_t i = 0; i < 6; ++i) {
        ExpectExactCopy(copier, SplitCopier::kMinSplitBytes + 4096 * t + i, 10 * t + i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Parts cover the copy exactly once, split at the alignment asked, and a
// part that fails, in either half, fails the copy.
TEST(SplitCopierTest, CopyByPartsCoversEveryByteOnceAndReportsAFailedPart) {
  SplitCopier copier(/*min_split_bytes=*/0);
  constexpr size_t kLength = (size_t{1} << 20) + 123;
  constexpr size_t kAlignment = 4096;
  for (const bool fail_first : {false, true}) {
    for (const bool fail_last : {false, true}) {
      std::mutex mu;
      std::vector<std::pair<size_t, size_t>> parts;
      const bool ok = copier.CopyByParts(kLength, kAlignment, [&](size_t offset, size_t length) {
        std::lock_guard lock(mu);
        parts.emplace_back(offset, length);
        return !(fail_first && offset == 0) && !(fail_last && offset + length == kLength);
      });
      EXPECT_EQ(ok, !fail_first && !fail_last);
      std::sort(parts.begin(), parts.end());
      ASSERT_FALSE(parts.empty());
      size_t covered = 0;
      for (const auto& [offset, length] : parts) {
        EXPECT_EQ(offset, covered);
        EXPECT_EQ(offset % kAlignment, 0u);
        covered += length;
      }
      EXPECT_EQ(covered, kLength);
    }
  }
}

TEST(SplitCopierTest, AThreadOnOneCpuCopiesWhole) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    SplitCopier copier;
    ExpectExactCopy(copier, 2 * SplitCopier::kMinSplitBytes + 5, 7);
  });
  pinned.join();
}

// The helper may run on every CPU the caller may but the one the caller
// is on: woken near a busy caller, it would wait for it instead of copying
// beside it.
TEST(SplitCopierTest, TheHelperRunsOffTheCallersCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "this process may run on one CPU only";
  SplitCopier copier(/*min_split_bytes=*/0);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id helper;
  cpu_set_t helper_allowed;
  CPU_ZERO(&helper_allowed);
  ASSERT_TRUE(copier.CopyByParts(size_t{1} << 20, 64, [&](size_t offset, size_t) {
    if (offset == 0) return true;
    helper = std::this_thread::get_id();
    return sched_getaffinity(0, sizeof helper_allowed, &helper_allowed) == 0;
  }));
  EXPECT_NE(helper, caller);
  EXPECT_EQ(CPU_COUNT(&helper_allowed), CPU_COUNT(&allowed) - 1);
  cpu_set_t joined;
  CPU_OR(&joined, &helper_allowed, &allowed);
  EXPECT_TRUE(CPU_EQUAL(&joined, &allowed)) << "the helper may run where the caller may not";
}

}  // namespace
}  // namespace rdv
