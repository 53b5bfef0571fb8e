// Host memory for tensors that a transport moves at full speed: each
// allocation is memory the transport allocated itself (UCX maps such memory
// into a peer directly), recycled through free lists by size so that a
// warm hot path neither allocates nor registers. With a GPU present its
// memory is page-locked for CUDA too. Also an Allocator for
// Tensor::Allocate. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "plugin/transport.h"

namespace rdv::plugin {

struct TransportAllocatorStats {
  uint64_t allocations = 0;    // Allocate calls
  uint64_t reused = 0;         // served from a free list
  uint64_t registrations = 0;  // new transport allocations
  uint64_t bytes_registered = 0;
  uint64_t bytes_cached = 0;   // free, kept for reuse
};

class TransportAllocator final : public Allocator,
                                 public std::enable_shared_from_this<TransportAllocator> {
 public:
  // `cache_bytes` bounds the free memory kept for reuse.
  TransportAllocator(std::shared_ptr<const Transport> transport, size_t cache_bytes);
  ~TransportAllocator() override;

  absl::string_view Name() const override { return name_; }
  // Pinned host memory on a machine with a GPU: its blocks are also
  // page-locked for CUDA, so GPU tensors stage through them with no copy of
  // their own.
  MemoryLocation Location() const override;
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

  // The transport memory holding [address, address + length), or null when
  // it is not from this allocator.
  const TransportMemory* Find(const void* address, size_t length) const;

  TransportAllocatorStats stats() const;

 private:
  void TrimCache();  // mu_ held
  void Pin(const TransportMemory& memory) const;
  void Unpin(const TransportMemory& memory) const;

  const std::shared_ptr<const Transport> transport_;
  const size_t cache_bytes_;
  const bool pin_for_cuda_;
  const std::string name_;
  mutable std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<TransportMemory>> live_;           // by address; mu_
  std::map<size_t, std::vector<std::unique_ptr<TransportMemory>>> free_;  // by size; mu_
  TransportAllocatorStats stats_;                                         // mu_
};

}  // namespace rdv::plugin
