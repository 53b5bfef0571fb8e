// Allocators hand out raw memory of one MemoryLocation. Buffers keep a
// shared_ptr to the allocator that made them, so an allocator lives as long
// as any of its memory. All methods are thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include "absl/strings/string_view.h"

#include "core/memory.h"
#include "core/status.h"

namespace rdv {

class Allocator {
 public:
  // Every allocation is aligned to this many bytes (a cache line; also
  // enough for any dtype and for DMA engines).
  static constexpr size_t kAlignment = 64;

  virtual ~Allocator() = default;
  virtual absl::string_view Name() const = 0;
  virtual MemoryLocation Location() const = 0;

  // At least `bytes` (> 0) of memory, or RESOURCE_EXHAUSTED saying how much
  // was asked of which allocator.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // `ptr` and `bytes` exactly as returned by / passed to Allocate.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
};

// The process-wide allocator of pageable host memory.
std::shared_ptr<Allocator> HostAllocator();

}  // namespace rdv
