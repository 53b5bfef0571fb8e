#include "core/caching_allocator.h"

#include <bit>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdv {

size_t AllocationSizeClass(size_t bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes <= 4096) return 4096;
  if (bytes <= kMiB) return std::bit_ceil(bytes);
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

CachingAllocator::CachingAllocator(std::shared_ptr<Allocator> base, size_t cache_bytes)
    : base_(std::move(base)),
      cache_bytes_(cache_bytes),
      name_(absl::StrCat("caching-", base_->Name())) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [size, blocks] : free_) {
    for (void* block : blocks) base_->Deallocate(block, size);
  }
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t size = AllocationSizeClass(bytes);
  {
    std::lock_guard lock(mu_);
    ++stats_.allocations;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= size;
      ++stats_.reused;
      return block;
    }
  }
  return base_->Allocate(size);
}

void CachingAllocator::Deallocate(void* ptr, size_t bytes) {
  const size_t size = AllocationSizeClass(bytes);
  std::lock_guard lock(mu_);
  free_[size].push_back(ptr);
  stats_.bytes_cached += size;
  Trim();
}

void CachingAllocator::Trim() {
  while (stats_.bytes_cached > cache_bytes_ && !free_.empty()) {
    auto largest = std::prev(free_.end());
    base_->Deallocate(largest->second.back(), largest->first);
    stats_.bytes_cached -= largest->first;
    largest->second.pop_back();
    if (largest->second.empty()) free_.erase(largest);
  }
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace rdv
