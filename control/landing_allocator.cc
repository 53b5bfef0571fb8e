#include "control/landing_allocator.h"

#include <cstdint>
#include <utility>

namespace rdv::control {

LandingAllocator::LandingAllocator(std::shared_ptr<Buffer> landing,
                                   std::shared_ptr<Allocator> fallback)
    : landing_(std::move(landing)),
      fallback_(std::move(fallback)),
      handed_out_(landing_ == nullptr || !landing_->location().is_host() ||
                  reinterpret_cast<uintptr_t>(landing_->data()) % kAlignment != 0) {}

absl::StatusOr<void*> LandingAllocator::Allocate(size_t bytes) {
  if (!handed_out_.load() && bytes == landing_->size() && !handed_out_.exchange(true)) {
    return landing_->data();
  }
  return fallback_->Allocate(bytes);
}

// The landing buffer stays the caller's: this allocator (and so every
// buffer carved from it) holds it until the last of them goes.
void LandingAllocator::Deallocate(void* ptr, size_t bytes) {
  if (landing_ != nullptr && ptr == landing_->data() && bytes == landing_->size()) return;
  fallback_->Deallocate(ptr, bytes);
}

}  // namespace rdv::control
