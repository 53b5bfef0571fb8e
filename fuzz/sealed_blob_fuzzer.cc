// Unseal on any bytes: every remote key and UCX transport address a peer
// sends is unsealed by the plugin before UCX or the NIC sees it. It
// accepts exactly the bytes Seal makes (what it accepts seals back to the
// same bytes) and never reads past them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "plugin/plugin_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rdv::plugin_support::Seal;
  using rdv::plugin_support::Unseal;
  size_t inner = 0;
  const void* blob = Unseal(data, size, &inner);
  if (blob != nullptr) {
    const std::string again = Seal(blob, inner);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  // And what Seal makes of the bytes is accepted, whole.
  const std::string sealed = Seal(data, size);
  if (Unseal(sealed.data(), sealed.size(), &inner) == nullptr || inner != size) std::abort();
  return 0;
}
