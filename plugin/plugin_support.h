// What every transport plugin needs besides its own protocol: error
// messages in the ABI's shape, the host's logger, the settings init hands
// in, the queue of work for the progress thread, copying blobs out with the
// ABI's length convention, and a sealed envelope for remote keys and
// addresses. Header-only, so that a plugin .so
// stays self-contained (it links nothing of rdv's).
#pragma once

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

// The settings init was given, checked against the table the plugin lists
// (the ABI's `settings`): a plugin reads its configuration here, never from
// the environment (the host fills what its caller left out from each
// setting's variable). Messages name a setting as "name (VARIABLE)", so a
// user finds it whichever way it was set.
class PluginSettings {
 public:
  template <size_t N>
  PluginSettings(const rdv_transport_setting_info_t (&table)[N], const char* plugin)
      : table_(table), count_(N), plugin_(plugin) {}

  // Takes the SETTINGS field of `params` (none when null or unset). A name
  // the table lacks is INVALID_ARGUMENT, naming those it has.
  int Configure(const rdv_transport_init_params_t* params, rdv_transport_error_t* error) {
    if (params == nullptr || !(params->field_mask & RDV_TRANSPORT_INIT_FIELD_SETTINGS)) {
      return RDV_TRANSPORT_OK;
    }
    for (size_t i = 0; i < params->num_settings; ++i) {
      const rdv_transport_setting_t& given = params->settings[i];
      if (given.name == nullptr || given.value == nullptr || Find(given.name) == nullptr) {
        return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                        "%s: no setting '%s'; it takes: %s", plugin_,
                        given.name != nullptr ? given.name : "(null)", Names().c_str());
      }
      values_.emplace_back(given.name, given.value);
    }
    return RDV_TRANSPORT_OK;
  }

  bool Given(const char* name) const { return Value(name) != nullptr; }
  // The value given for `name` (one of the table's), else its default.
  std::string Text(const char* name) const {
    const std::string* value = Value(name);
    return value != nullptr ? *value : Find(name)->default_value;
  }
  // The index in `choices` of the value of `name`; INVALID_ARGUMENT else.
  int Choice(const char* name, std::initializer_list<const char*> choices, int* index,
             rdv_transport_error_t* error) const {
    const std::string text = Text(name);
    std::string listed;
    int i = 0;
    for (const char* choice : choices) {
      if (text == choice) {
        *index = i;
        return RDV_TRANSPORT_OK;
      }
      listed += (i++ == 0 ? "'" : ", '") + std::string(choice) + "'";
    }
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "%s='%s': expected one of %s",
                    Label(name).c_str(), text.c_str(), listed.c_str());
  }
  // The value of `name` as an integer in [low, high]; INVALID_ARGUMENT else.
  int Integer(const char* name, long low, long high, long* value,
              rdv_transport_error_t* error) const {
    const std::string text = Text(name);
    char* end = nullptr;
    errno = 0;
    const long parsed = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || errno != 0 || *end != '\0' || parsed < low || parsed > high) {
      return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                      "%s='%s': expected an integer in [%ld, %ld]", Label(name).c_str(),
                      text.c_str(), low, high);
    }
    *value = parsed;
    return RDV_TRANSPORT_OK;
  }
  // "name (VARIABLE)", for messages.
  std::string Label(const char* name) const {
    const rdv_transport_setting_info_t* info = Find(name);
    return info->environment != nullptr ? std::string(name) + " (" + info->environment + ")"
                                        : std::string(name);
  }

 private:
  const rdv_transport_setting_info_t* Find(const char* name) const {
    for (size_t i = 0; i < count_; ++i) {
      if (std::strcmp(table_[i].name, name) == 0) return &table_[i];
    }
    return nullptr;
  }
  const std::string* Value(const char* name) const {
    for (auto it = values_.rbegin(); it != values_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
    return nullptr;
  }
  std::string Names() const {
    std::string names;
    for (size_t i = 0; i < count_; ++i) names += (i == 0 ? "" : ", ") + std::string(table_[i].name);
    return names;
  }

  const rdv_transport_setting_info_t* table_;
  size_t count_;
  const char* plugin_;
  std::vector<std::pair<std::string, std::string>> values_;
};

// The ABI's `settings` for a plugin whose table is `table`.
template <size_t N>
const rdv_transport_setting_info_t* ListSettings(const rdv_transport_setting_info_t (&table)[N],
                                                 size_t* count) {
  *count = N;
  return table;
}

// Work another thread hands the progress thread. Callbacks run on the
// progress thread only (the ABI's promise), so whatever ends elsewhere (a
// cancel, an abort, a disconnect) is queued here, and the progress thread
// takes it on its next round; the one who pushes wakes that round in the
// plugin's own way (UCX signals its worker, verbs writes an eventfd).
//
// The flag is stored and loaded seq_cst, so that a progress thread may
// pair it with a flag of its own: it says it sleeps, then looks here; the
// pusher pushes, then looks whether it sleeps (one of them sees the other).
template <typename Item>
class ProgressQueue {
 public:
  void Push(Item item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
    has_items_.store(true, std::memory_order_seq_cst);
  }
  void PushAll(const std::vector<Item>& items) {
    std::lock_guard lock(mu_);
    items_.insert(items_.end(), items.begin(), items.end());
    has_items_.store(true, std::memory_order_seq_cst);
  }
  // Whether anything is queued (one atomic load).
  bool Pending() const { return has_items_.load(std::memory_order_seq_cst); }
  // On the progress thread: everything queued, oldest first.
  std::vector<Item> Take() {
    std::vector<Item> taken;
    if (!Pending()) return taken;
    std::lock_guard lock(mu_);
    taken.swap(items_);
    has_items_.store(false, std::memory_order_relaxed);
    return taken;
  }

 private:
  std::mutex mu_;
  std::vector<Item> items_;  // mu_
  std::atomic<bool> has_items_{false};
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
