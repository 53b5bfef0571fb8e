// A contiguous block of bytes in one MemoryLocation, shared by reference
// counting (std::shared_ptr<Buffer>): copies of a Tensor share it, and the
// memory is released when the last reference goes, on whichever thread drops
// it.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "core/allocator.h"
#include "core/memory.h"
#include "core/status.h"

namespace rdv {

class Buffer {
 public:
  // `bytes` from `allocator`, given back to it on release. 0 bytes gives a
  // buffer with a null data pointer.
  static absl::StatusOr<std::shared_ptr<Buffer>> Allocate(std::shared_ptr<Allocator> allocator,
                                                          size_t bytes);

  // Memory the caller owns; `release` runs once, when the last reference
  // goes (it may be empty when nothing needs releasing).
  static std::shared_ptr<Buffer> Wrap(void* data, size_t size, MemoryLocation location,
                                      absl::AnyInvocable<void() &&> release);

  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  MemoryLocation location() const { return location_; }

 private:
  Buffer(void* data, size_t size, MemoryLocation location, absl::AnyInvocable<void() &&> release)
      : data_(data), size_(size), location_(location), release_(std::move(release)) {}

  void* const data_;
  const size_t size_;
  const MemoryLocation location_;
  absl::AnyInvocable<void() &&> release_;
};

}  // namespace rdv
