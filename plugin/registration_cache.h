// Finds the transport registration that covers a buffer: the
// TransportAllocator's own memory when the buffer came from it, else a
// cached registration of the buffer, else a new one. Cached registrations
// are looked up by address interval, belong to one Buffer (a freed buffer's
// registration is dropped when its address shows up again; CUDA memory is
// registered per allocation and keyed by its buffer id), and are evicted
// least recently used first beyond a byte bound, never while a transfer
// holds them. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/buffer.h"
#include "plugin/transport_allocator.h"

namespace rdv::plugin {

struct RegistrationCacheStats {
  uint64_t pool_hits = 0;      // memory from the TransportAllocator
  uint64_t hits = 0;           // a cached registration
  uint64_t misses = 0;         // registered now
  uint64_t invalidations = 0;  // dropped: its buffer was freed
  uint64_t evictions = 0;      // dropped: over the byte bound
  uint64_t bytes_registered = 0;
};

// Keeps the registration alive for one transfer.
struct Registration {
  const TransportMemory* memory = nullptr;
  std::shared_ptr<const TransportMemory> hold;  // null for pool memory
};

class RegistrationCache {
 public:
  RegistrationCache(std::shared_ptr<const Transport> transport,
                    std::shared_ptr<TransportAllocator> pool, size_t max_bytes);

  absl::StatusOr<Registration> Lookup(const std::shared_ptr<Buffer>& buffer);
  RegistrationCacheStats stats() const;

 private:
  struct Entry {
    std::weak_ptr<Buffer> owner;  // host memory: the buffer registered
    std::shared_ptr<const TransportMemory> memory;
    uint64_t last_use = 0;
    uint64_t cuda_buffer_id = 0;  // CUDA memory: the allocation registered
  };
  absl::StatusOr<Registration> LookupCuda(const Buffer& buffer);
  // A cached registration at `start` that `valid` accepts, else null after
  // dropping what was there. mu_ held.
  template <typename Valid>
  const Entry* Find(uintptr_t start, Valid valid);
  Registration Add(uintptr_t start, Entry entry);  // mu_ held
  void Evict();  // mu_ held

  const std::shared_ptr<const Transport> transport_;
  const std::shared_ptr<TransportAllocator> pool_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Entry> entries_;  // by start address; mu_
  uint64_t clock_ = 0;                  // mu_
  RegistrationCacheStats stats_;        // mu_
};

}  // namespace rdv::plugin
