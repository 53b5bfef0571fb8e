// An allocator that hands out a caller's buffer once (RendezvousArgs::
// landing), when an allocation asks for exactly its size, and otherwise
// what `fallback` gives: a remote Recv then writes the bytes straight into
// the caller's memory, with no copy after the transfer. Thread-safe.
#pragma once

#include <atomic>
#include <memory>

#include "core/allocator.h"
#include "core/buffer.h"

namespace rdv::control {

class LandingAllocator final : public Allocator {
 public:
  // `landing` must be host memory aligned to kAlignment, else it is never
  // handed out.
  LandingAllocator(std::shared_ptr<Buffer> landing, std::shared_ptr<Allocator> fallback);

  absl::string_view Name() const override { return "landing"; }
  MemoryLocation Location() const override { return fallback_->Location(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;

 private:
  const std::shared_ptr<Buffer> landing_;
  const std::shared_ptr<Allocator> fallback_;
  std::atomic<bool> handed_out_;
};

}  // namespace rdv::control
