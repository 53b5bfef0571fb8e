// The fast path's ids for keys (TensorMeta.fast_path_key), on both sides.
// A producer gives a consumer an unguessable id for a key it answered
// (FastKeyIds, in its tensor service); the consumer keeps what it learned
// per producer worker (FastKeys, in the WorkerClient), and a later Recv of
// the key asks for its next value by that id through the data plane
// (control/fast_path.h) instead of a RecvTensor call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/tensor_shape.h"

namespace rdv::control {

struct KnownFastKey {
  uint64_t id = 0;  // the producer's capability for this key and consumer
  DType dtype = DType::kInvalid;
  TensorShape shape;  // of the value last received
  // Never null. Shared by every Recv of the key: a Recv copies this struct,
  // and on glibc a string copied on the Recv's thread and freed on the
  // progress thread costs an arena lock (docs/fast_path.md, "The allocator").
  std::shared_ptr<const std::string> producer_transport_address;
  // The producer writes values into the destination a request names
  // (TensorMeta.fast_path_put), instead of sending them tagged.
  bool put = false;
  // The producer holds values for the consumer to read, then release
  // (TensorMeta.fast_path_get).
  bool get = false;
};

class FastKeys {
 public:
  // Keys kept per producer; past it, new keys keep to RecvTensor.
  static constexpr size_t kCapacity = 65536;

  void Learn(absl::string_view key, KnownFastKey known) {
    std::lock_guard lock(mu_);
    auto it = keys_.find(key);
    if (it != keys_.end()) {
      it->second = std::move(known);
    } else if (keys_.size() < kCapacity) {
      keys_.emplace(std::string(key), std::move(known));
    }
  }
  void Forget(absl::string_view key) {
    std::lock_guard lock(mu_);
    keys_.erase(key);
  }
  std::optional<KnownFastKey> Find(absl::string_view key) const {
    std::lock_guard lock(mu_);
    auto it = keys_.find(key);
    if (it == keys_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, KnownFastKey> keys_;  // mu_
};

// Producer side: each id bound to the key and to the consumer's transport
// address it was given to; a request naming it is served to that address
// only.
class FastKeyIds {
 public:
  struct Entry {
    std::string key;
    std::string consumer_address;
  };
  // Ids kept; past it, new keys get none (and keep to RecvTensor).
  static constexpr size_t kCapacity = 65536;

  // The id of `key` for the consumer at `consumer_address` (the same one
  // each time); 0 when the table is full.
  uint64_t Intern(absl::string_view key, absl::string_view consumer_address) {
    std::string both = absl::StrCat(consumer_address.size(), ":", consumer_address, key);
    std::lock_guard lock(mu_);
    if (auto it = ids_.find(both); it != ids_.end()) return it->second;
    if (ids_.size() >= kCapacity) return 0;
    uint64_t id = 0;
    while (id == 0 || entries_.contains(id)) id = absl::Uniform<uint64_t>(random_);
    entries_.emplace(id, Entry{std::string(key), std::string(consumer_address)});
    ids_.emplace(std::move(both), id);
    return id;
  }
  std::optional<Entry> Find(uint64_t id) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  absl::BitGen random_;                                // mu_
  absl::flat_hash_map<uint64_t, Entry> entries_;       // mu_
  absl::flat_hash_map<std::string, uint64_t> ids_;     // mu_: by address and key
};

}  // namespace rdv::control
