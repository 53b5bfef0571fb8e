// Keeps freed memory of another allocator for reuse, in free lists by size
// class, so that a hot path of recurring tensor sizes neither allocates nor
// frees: cudaMalloc and cudaFreeHost are slow, and cudaFree waits for the
// whole device. Bounded: beyond `cache_bytes` of free memory the largest
// free blocks go back first. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"

namespace rdv {

// The size an allocation of `bytes` is rounded to, its free-list class:
// powers of two up to 1 MiB, whole MiBs above (a large tensor wastes at most
// 1 MiB, and recurring sizes still match).
size_t AllocationSizeClass(size_t bytes);

struct CachingAllocatorStats {
  uint64_t allocations = 0;  // Allocate calls
  uint64_t reused = 0;       // served from a free list
  uint64_t bytes_cached = 0; // free, kept for reuse
};

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(std::shared_ptr<Allocator> base, size_t cache_bytes);
  ~CachingAllocator() override;

  absl::string_view Name() const override { return name_; }
  MemoryLocation Location() const override { return base_->Location(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

  CachingAllocatorStats stats() const;

 private:
  void Trim();  // mu_ held

  const std::shared_ptr<Allocator> base_;
  const size_t cache_bytes_;
  const std::string name_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // by size class; mu_
  CachingAllocatorStats stats_;                // mu_
};

}  // namespace rdv
