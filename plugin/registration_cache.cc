#include "plugin/registration_cache.h"

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
  const auto start = reinterpret_cast<uintptr_t>(buffer->data());
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(start);
    if (it != entries_.end()) {
      if (it->second.owner.lock() == buffer && it->second.memory->length() >= buffer->size()) {
        ++stats_.hits;
        it->second.last_use = ++clock_;
        return Registration{it->second.memory.get(), it->second.memory};
      }
      // Another (freed) buffer lived here, or this one grew: drop it.
      ++stats_.invalidations;
      stats_.bytes_registered -= it->second.memory->length();
      entries_.erase(it);
    }
  }
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<const TransportMemory> memory,
                       transport_->Register(buffer->data(), buffer->size()));
  std::lock_guard lock(mu_);
  ++stats_.misses;
  stats_.bytes_registered += memory->length();
  entries_[start] = Entry{buffer, memory, ++clock_};
  Evict();
  return Registration{memory.get(), memory};
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
