#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"

namespace rdv {
namespace {

class AlignedHostAllocator final : public Allocator {
 public:
  absl::string_view Name() const override { return "host"; }
  MemoryLocation Location() const override { return MemoryLocation::Host(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* ptr = ::operator new(bytes, std::align_val_t{kAlignment}, std::nothrow);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocator: out of memory allocating ", bytes, " bytes"));
    }
    return ptr;
  }

  void Deallocate(void* ptr, size_t /*bytes*/) override {
    ::operator delete(ptr, std::align_val_t{kAlignment});
  }
};

}  // namespace

std::shared_ptr<Allocator> HostAllocator() {
  static const std::shared_ptr<Allocator> allocator = std::make_shared<AlignedHostAllocator>();
  return allocator;
}

}  // namespace rdv
