#include "plugin/transport_allocator.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/caching_allocator.h"
#include "core/cuda.h"
#include "core/logging.h"

namespace rdv::plugin {

TransportAllocator::TransportAllocator(std::shared_ptr<const Transport> transport,
                                       size_t cache_bytes)
    : transport_(std::move(transport)),
      cache_bytes_(cache_bytes),
      pin_for_cuda_(cuda::DeviceCount() > 0),
      name_(absl::StrCat(transport_->name(), pin_for_cuda_ ? "-pinned-host" : "-host")) {}

TransportAllocator::~TransportAllocator() {
  for (const auto& [address, memory] : live_) Unpin(*memory);
  for (const auto& [size, blocks] : free_) {
    for (const auto& memory : blocks) Unpin(*memory);
  }
}

MemoryLocation TransportAllocator::Location() const {
  return pin_for_cuda_ ? MemoryLocation::PinnedHost() : MemoryLocation::Host();
}

void TransportAllocator::Pin(const TransportMemory& memory) const {
  if (!pin_for_cuda_) return;
  // Still correct unpinned: DMA copies from pageable memory only run slower.
  if (const absl::Status pinned = cuda::PinHostMemory(memory.address(), memory.length());
      !pinned.ok()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      RDV_LOG(Warning) << name_ << ": " << pinned << "; GPU copies of its tensors run slower";
    }
  }
}

void TransportAllocator::Unpin(const TransportMemory& memory) const {
  if (pin_for_cuda_) cuda::UnpinHostMemory(memory.address());
}

absl::StatusOr<void*> TransportAllocator::Allocate(size_t bytes) {
  const size_t size = AllocationSizeClass(bytes);
  std::unique_ptr<TransportMemory> memory;
  {
    std::lock_guard lock(mu_);
    ++stats_.allocations;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      memory = std::move(it->second.back());
      it->second.pop_back();
      stats_.bytes_cached -= size;
      ++stats_.reused;
    }
  }
  if (memory == nullptr) {
    RDV_ASSIGN_OR_RETURN(memory, transport_->Allocate(size));
    Pin(*memory);
    std::lock_guard lock(mu_);
    ++stats_.registrations;
    stats_.bytes_registered += size;
  }
  void* address = memory->address();
  std::lock_guard lock(mu_);
  live_.emplace(reinterpret_cast<uintptr_t>(address), std::move(memory));
  return address;
}

void TransportAllocator::Deallocate(void* ptr, size_t) {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) return;
  std::unique_ptr<TransportMemory> memory = std::move(it->second);
  live_.erase(it);
  stats_.bytes_cached += memory->length();
  free_[memory->length()].push_back(std::move(memory));
  TrimCache();
}

void TransportAllocator::TrimCache() {
  // Gives back the largest free blocks first: they cost the most to keep.
  while (stats_.bytes_cached > cache_bytes_ && !free_.empty()) {
    auto largest = std::prev(free_.end());
    stats_.bytes_cached -= largest->second.back()->length();
    stats_.bytes_registered -= largest->second.back()->length();
    Unpin(*largest->second.back());
    largest->second.pop_back();
    if (largest->second.empty()) free_.erase(largest);
  }
}

const TransportMemory* TransportAllocator::Find(const void* address, size_t length) const {
  const auto start = reinterpret_cast<uintptr_t>(address);
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(start);
  if (it == live_.begin()) return nullptr;
  --it;
  const TransportMemory& memory = *it->second;
  if (start + length > it->first + memory.length()) return nullptr;
  return &memory;
}

TransportAllocatorStats TransportAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace rdv::plugin
