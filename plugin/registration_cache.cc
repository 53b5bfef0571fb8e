#include "plugin/registration_cache.h"

#include <utility>

#include "core/cuda.h"

namespace rdv::plugin {

RegistrationCache::RegistrationCache(std::shared_ptr<const Transport> transport,
                                     std::shared_ptr<TransportAllocator> pool, size_t max_bytes)
    : transport_(std::move(transport)), pool_(std::move(pool)), max_bytes_(max_bytes) {}

absl::StatusOr<Registration> RegistrationCache::Lookup(const std::shared_ptr<Buffer>& buffer) {
  if (pool_ != nullptr) {
    if (const TransportMemory* memory = pool_->Find(buffer->data(), buffer->size())) {
      std::lock_guard lock(mu_);
      ++stats_.pool_hits;
      return Registration{memory, nullptr};
    }
  }
  if (buffer->location().kind == MemoryKind::kCudaDevice) return LookupCuda(*buffer);
  const auto start = reinterpret_cast<uintptr_t>(buffer->data());
  {
    std::lock_guard lock(mu_);
    if (const Entry* entry = Find(start, [&](const Entry& e) {
          return e.owner.lock() == buffer && e.memory->length() >= buffer->size();
        })) {
      return Registration{entry->memory.get(), entry->memory};
    }
  }
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<const TransportMemory> memory,
                       transport_->Register(buffer->data(), buffer->size()));
  std::lock_guard lock(mu_);
  return Add(start, Entry{buffer, std::move(memory), 0, 0});
}

// CUDA memory: the whole allocation is registered once, and stays valid
// for every buffer carved from it again (a caching allocator's reuse) while
// the allocation's buffer id is the same.
absl::StatusOr<Registration> RegistrationCache::LookupCuda(const Buffer& buffer) {
  RDV_ASSIGN_OR_RETURN(const cuda::DeviceAllocation allocation, cuda::AllocationOf(buffer.data()));
  {
    std::lock_guard lock(mu_);
    if (const Entry* entry = Find(allocation.base, [&](const Entry& e) {
          return e.cuda_buffer_id == allocation.buffer_id;
        })) {
      return Registration{entry->memory.get(), entry->memory};
    }
  }
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<const TransportMemory> memory,
                       transport_->Register(reinterpret_cast<void*>(allocation.base),
                                            allocation.size, buffer.location()));
  std::lock_guard lock(mu_);
  return Add(allocation.base, Entry{{}, std::move(memory), 0, allocation.buffer_id});
}

template <typename Valid>
const RegistrationCache::Entry* RegistrationCache::Find(uintptr_t start, Valid valid) {
  auto it = entries_.find(start);
  if (it == entries_.end()) return nullptr;
  if (valid(it->second)) {
    ++stats_.hits;
    it->second.last_use = ++clock_;
    return &it->second;
  }
  // Another (freed) buffer or allocation lived here, or this one grew.
  ++stats_.invalidations;
  stats_.bytes_registered -= it->second.memory->length();
  entries_.erase(it);
  return nullptr;
}

Registration RegistrationCache::Add(uintptr_t start, Entry entry) {
  // Another thread may have registered the same memory meanwhile.
  if (auto it = entries_.find(start); it != entries_.end()) {
    stats_.bytes_registered -= it->second.memory->length();
  }
  ++stats_.misses;
  stats_.bytes_registered += entry.memory->length();
  entry.last_use = ++clock_;
  const Registration registration{entry.memory.get(), entry.memory};
  entries_[start] = std::move(entry);
  Evict();
  return registration;
}

void RegistrationCache::Evict() {
  while (stats_.bytes_registered > max_bytes_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const bool idle = it->second.memory.use_count() == 1;
      if (idle && (victim == entries_.end() || it->second.last_use < victim->second.last_use)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return;  // everything is in use
    ++stats_.evictions;
    stats_.bytes_registered -= victim->second.memory->length();
    entries_.erase(victim);
  }
}

RegistrationCacheStats RegistrationCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace rdv::plugin
