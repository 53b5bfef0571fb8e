// What every transport plugin needs besides its own protocol: error
// messages in the ABI's shape, the host's logger, copying blobs out with the
// ABI's length convention, and a sealed envelope for remote keys and
// addresses. Header-only, so that a
// plugin .so stays self-contained (it links nothing of rdv's).
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "plugin/rdv_transport.h"

#define RDV_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace rdv::plugin_support {

// Fills `error` (when not null) and returns `code`.
inline int SetError(rdv_transport_error_t* error, int code, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
inline int SetError(rdv_transport_error_t* error, int code, const char* format, ...) {
  if (error != nullptr) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
  }
  return code;
}

// The host's logger, from init's parameters: a plugin logs through it only
// (never to stdout), at the host's level or more severe.
class PluginLog {
 public:
  // Reads the LOG and LOG_LEVEL fields `params` carries (none when null).
  void Configure(const rdv_transport_init_params_t* params) {
    if (params == nullptr) return;
    if (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG) {
      fn_ = params->log;
      user_ = params->log_user;
    }
    if (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL) level_ = params->log_level;
  }
  // Levels as the ABI numbers them: 0 error ... 4 trace.
  void operator()(int level, const std::string& message) const {
    if (fn_ != nullptr && level <= level_) fn_(user_, level, message.c_str());
  }

 private:
  rdv_transport_log_fn fn_ = nullptr;
  void* user_ = nullptr;
  int level_ = 1;
};

// Copies `size` bytes to `buffer`; `*length` is its capacity in and the
// size out. RESOURCE_EXHAUSTED (with the size needed) when it is too small.
inline int CopyOut(const void* data, size_t size, void* buffer, size_t* length,
                   rdv_transport_error_t* error) {
  if (*length < size) {
    const size_t capacity = *length;
    *length = size;
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "needs %zu bytes, buffer has %zu",
                    size, capacity);
  }
  std::memcpy(buffer, data, size);
  *length = size;
  return RDV_TRANSPORT_OK;
}

inline uint64_t Fnv1a(const void* data, size_t size) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    hash = (hash ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  }
  return hash;
}

// Remote keys and transport addresses travel sealed: a header with a magic
// number, the length and a checksum, so that a blob cut, corrupted or made
// up on the way is refused before it reaches the transport library (UCX
// crashes on a garbage key and aborts on a garbage address). Not a MAC:
// who may send blobs at all is the control plane's door (docs/security.md).
struct KeyHeader {
  uint32_t magic;
  uint32_t length;
  uint64_t checksum;
};
inline constexpr uint32_t kKeyMagic = 0x4b564452;  // "RDVK"

inline std::string Seal(const void* blob, size_t size) {
  std::string sealed(sizeof(KeyHeader) + size, '\0');
  const KeyHeader header{kKeyMagic, static_cast<uint32_t>(size), Fnv1a(blob, size)};
  std::memcpy(sealed.data(), &header, sizeof(header));
  std::memcpy(sealed.data() + sizeof(header), blob, size);
  return sealed;
}

// The blob inside sealed bytes, or null when the bytes are not one;
// `*size` is the blob's length.
inline const void* Unseal(const void* sealed, size_t length, size_t* size) {
  KeyHeader header;
  if (length < sizeof(header)) return nullptr;
  std::memcpy(&header, sealed, sizeof(header));
  const void* key = static_cast<const char*>(sealed) + sizeof(header);
  if (header.magic != kKeyMagic || header.length != length - sizeof(header) ||
      header.checksum != Fnv1a(key, header.length)) {
    return nullptr;
  }
  *size = header.length;
  return key;
}

}  // namespace rdv::plugin_support
