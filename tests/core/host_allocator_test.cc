#include "core/allocator.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv {
namespace {

// The VmFlags line of the mapping that holds `address`, or "" when none
// does.
std::string VmFlagsAt(const void* address) {
  const std::optional<testing::Mapping> mapping = testing::MappingAt(address);
  return mapping.has_value() ? mapping->vm_flags : "";
}

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

void* FirstHugePageIn(void* block) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(block) + kHugePage - 1) &
                                 ~(kHugePage - 1));
}

TEST(HostAllocatorTest, ALargeBlockAsksForHugePages) {
  const size_t bytes = size_t{16} << 20;
  absl::StatusOr<void*> block = HostAllocator()->Allocate(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  const std::string flags = VmFlagsAt(FirstHugePageIn(*block));
  HostAllocator()->Deallocate(*block, bytes);
  EXPECT_TRUE(absl::StrContains(flags, " hg")) << flags;
}

TEST(HostAllocatorTest, ASmallBlockLeavesItsPagesAlone) {
  const size_t bytes = size_t{1} << 20;
  absl::StatusOr<void*> block = HostAllocator()->Allocate(bytes);
  ASSERT_TRUE(block.ok()) << block.status();
  std::memset(*block, 1, bytes);  // the whole size is usable (ASan checks)
  const std::string flags = VmFlagsAt(*block);
  HostAllocator()->Deallocate(*block, bytes);
  ASSERT_FALSE(flags.empty());
  EXPECT_FALSE(absl::StrContains(flags, " hg")) << flags;
}

}  // namespace
}  // namespace rdv
