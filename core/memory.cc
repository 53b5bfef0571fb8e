#include "core/memory.h"

#include "absl/strings/str_cat.h"

namespace rdv {

std::string MemoryLocation::ToString() const {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kPinnedHost: return "pinned-host";
    case MemoryKind::kCudaDevice: return absl::StrCat("cuda:", device);
  }
  return "unknown";
}

}  // namespace rdv
