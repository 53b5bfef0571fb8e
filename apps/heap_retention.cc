#include "apps/heap_retention.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/logging.h"
#include "core/sanitizers.h"

namespace rdv {
namespace {

bool UserSetMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
         std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr);
}

}  // namespace

bool KeepFreedHeap() {
  if (kSanitizedBuild || UserSetMalloc()) return false;
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
