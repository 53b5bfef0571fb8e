// ParsedKey::Parse on any bytes: a key comes from a peer in every
// RecvTensor. It accepts or refuses with a bounded message; an accepted
// key prints back as the bytes it was parsed from.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/rendezvous_key.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rdv::ParsedKey> key = rdv::ParsedKey::Parse(text);
  if (!key.ok()) {
    if (key.status().message().size() > 1024) std::abort();
    return 0;
  }
  if (key->FullKey() != text || key->edge_name().empty()) std::abort();
  return 0;
}
