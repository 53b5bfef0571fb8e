#include "core/buffer.h"

#include <utility>

namespace rdv {

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::Allocate(std::shared_ptr<Allocator> allocator,
                                                         size_t bytes) {
  const MemoryLocation location = allocator->Location();
  if (bytes == 0) return Wrap(nullptr, 0, location, nullptr);
  RDV_ASSIGN_OR_RETURN(void* data, allocator->Allocate(bytes));
  return Wrap(data, bytes, location, [allocator = std::move(allocator), data, bytes]() {
    allocator->Deallocate(data, bytes);
  });
}

std::shared_ptr<Buffer> Buffer::Wrap(void* data, size_t size, MemoryLocation location,
                                     absl::AnyInvocable<void() &&> release) {
  return std::shared_ptr<Buffer>(new Buffer(data, size, location, std::move(release)));
}

Buffer::~Buffer() {
  if (release_) std::move(release_)();
}

}  // namespace rdv
