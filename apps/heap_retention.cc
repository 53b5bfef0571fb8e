#include "apps/heap_retention.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/logging.h"

namespace rdv {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

bool UserSetMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
         std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr);
}

}  // namespace

bool GlibcMallocInUse() { return !kSanitizerAllocator; }

bool KeepFreedHeap() {
  if (!GlibcMallocInUse() || UserSetMalloc()) return false;
  // glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems, and the trim
  // threshold its adaptive rule pairs with it (twice the mmap threshold).
  constexpr int kLargestHeapBlock = 32 << 20;
  constexpr int kFreeHeapKept = 2 * kLargestHeapBlock;
  if (mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 0 ||
      mallopt(M_TRIM_THRESHOLD, kFreeHeapKept) == 0) {
    RDV_LOG(Warning) << "mallopt refused the heap thresholds; freed heap goes back to the kernel"
                     << " as glibc decides";
    return false;
  }
  return true;
}

}  // namespace rdv
